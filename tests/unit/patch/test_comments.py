"""A patch leaves out the trailing comments its changes made untrue (issue 40, item 11), and only
those: a comment beside code it only added to, on a line it left alone, or addressed to a tool,
stays."""

from __future__ import annotations

import pytest

from torchdoctor.patch._comments import comment_columns, stale_comments_dropped


@pytest.mark.parametrize(
    ("before", "after", "dropped"),
    [
        # the three: each comment was written for the line as it was
        ("dl = DataLoader(ds, num_workers=0)  # 'num_workers=0' keeps it simple\n",
         "dl = DataLoader(ds, num_workers=4, persistent_workers=True)  # 'num_workers=0' keeps "
         "it simple\n", "# 'num_workers=0' keeps it simple"),
        ("torch.set_num_threads(2)  # use both cores\n",
         "torch.set_num_threads(1)  # use both cores\n", "# use both cores"),
        ("def f(x):\n    w = torch.tensor(W, device=x.device)  # rebuilt every step\n",
         "def f(x):\n    w = self.w  # rebuilt every step\n", "# rebuilt every step"),
        # code only added to, the comment naming none of it: still true
        ("dl = DataLoader(ds, batch_size=8)  # the batch\n",
         "dl = DataLoader(ds, batch_size=8, num_workers=4)  # the batch\n", None),
        # added to, and the comment names what was added: no longer true
        ("dl = DataLoader(ds, batch_size=8)  # no workers: simpler\n",
         "dl = DataLoader(ds, batch_size=8, num_workers=4)  # no workers: simpler\n",
         "# no workers: simpler"),
        # a tool's instruction stays whatever changed
        ("torch.set_num_threads(2)  # type: ignore[attr-defined]\n",
         "torch.set_num_threads(1)  # type: ignore[attr-defined]\n", None),
        ("torch.set_num_threads(2)  # noqa: E501\n", "torch.set_num_threads(1)  # noqa: E501\n",
         None),
    ],
)  # fmt: skip
def test_a_comment_on_a_changed_line_stays_only_while_it_is_true(before, after, dropped):
    text, left_out = stale_comments_dropped(before, after)
    if dropped is None:
        assert (text, left_out) == (after, [])
    else:
        line = after.count("\n")
        assert text == after.replace("  " + dropped, "")
        assert left_out == [(line, dropped)]


def test_comments_on_their_own_lines_and_on_unchanged_lines_stay_and_endings_are_kept():
    before = "# workers: none\r\nx = 1  # one\r\ndl = f(num_workers=0)  # none\r\ny = 2  # two\r\n"
    after = before.replace("num_workers=0", "num_workers=4")
    text, dropped = stale_comments_dropped(before, after)
    assert text == "# workers: none\r\nx = 1  # one\r\ndl = f(num_workers=4)\r\ny = 2  # two\r\n"
    assert dropped == [(3, "# none")]


def test_a_hash_in_a_string_is_no_comment():
    text = (
        "s = '#not' + \"#this\"  # but this\n"
        "t = 'it\\'s # here'\n"
        'doc = """\n'
        "a line # inside the string\n"
        '"""  # after it\n'
        "u = f\"{x['#k']}\"\n"
    )
    assert comment_columns(text) == {1: text.splitlines()[0].index("# but"), 5: 5}
    # a line of a multi-line string changed beside its neighbour: no comment is taken from it
    after = text.replace("a line # inside", "a line # in")
    assert stale_comments_dropped(text, after) == (after, [])
