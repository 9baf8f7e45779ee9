"""A patch leaves out the trailing comments its changes made untrue (issue 40, item 11), and only
those: a comment beside code it only added to, or on a line it left alone, stays."""

from __future__ import annotations

import pytest

from torchdoctor.patch._comments import split_comment, stale_comments_dropped


@pytest.mark.parametrize(
    ("before", "after", "kept"),
    [
        # the three: each comment was written for the line as it was
        ("dl = DataLoader(ds, num_workers=0)  # 'num_workers=0' keeps it simple\n",
         "dl = DataLoader(ds, num_workers=4, persistent_workers=True)  # 'num_workers=0' keeps "
         "it simple\n", False),
        ("torch.set_num_threads(2)  # use both cores\n",
         "torch.set_num_threads(1)  # use both cores\n", False),
        ("    w = torch.tensor(W, device=x.device)  # rebuilt every step\n",
         "    w = self.w  # rebuilt every step\n", False),
        # code only added to, the comment naming none of it: still true
        ("dl = DataLoader(ds, batch_size=8)  # the batch\n",
         "dl = DataLoader(ds, batch_size=8, num_workers=4)  # the batch\n", True),
        # added to, and the comment names what was added: no longer true
        ("dl = DataLoader(ds, batch_size=8)  # no workers: simpler\n",
         "dl = DataLoader(ds, batch_size=8, num_workers=4)  # no workers: simpler\n", False),
    ],
)  # fmt: skip
def test_a_comment_on_a_changed_line_stays_only_while_it_is_true(before, after, kept):
    text, dropped = stale_comments_dropped(before, after)
    comment = split_comment(before.rstrip("\n"))[1]
    if kept:
        assert (text, dropped) == (after, [])
    else:
        assert text == split_comment(after.rstrip("\n"))[0].rstrip() + "\n"
        assert dropped == [(1, comment)]


def test_comments_on_their_own_lines_and_on_unchanged_lines_stay_and_endings_are_kept():
    before = "# workers: none\r\nx = 1  # one\r\ndl = f(num_workers=0)  # none\r\ny = 2  # two\r\n"
    after = before.replace("num_workers=0", "num_workers=4")
    text, dropped = stale_comments_dropped(before, after)
    assert text == "# workers: none\r\nx = 1  # one\r\ndl = f(num_workers=4)\r\ny = 2  # two\r\n"
    assert dropped == [(3, "# none")]


def test_a_hash_in_a_string_is_no_comment():
    assert split_comment("s = '#not' + \"#this\"  # but this") == (
        "s = '#not' + \"#this\"  ",
        "# but this",
    )
    assert split_comment("s = 'it\\'s # here'") == ("s = 'it\\'s # here'", "")
    assert split_comment('s = """# doc"""  # c') == ('s = """# doc"""  ', "# c")
