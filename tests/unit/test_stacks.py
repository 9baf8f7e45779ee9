"""Where a stopped script was: faulthandler's dump read, and when a run had stalled."""

from __future__ import annotations

import pytest

from torchdoctor.process.stacks import parse, stalled_for
from torchdoctor.process.stream import LoggedStep

DUMP = """Thread 0x00007fc1d391c6c0 (most recent call first):
  File "/work/job/train.py", line 4 in <lambda>
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007fc1d4457b80 (most recent call first):
  File "/venv/lib/python3.11/site-packages/torch/autograd/graph.py", line 979 in _engine_run_backward
  File "/venv/lib/python3.11/site-packages/torch/_tensor.py", line 623 in backward
  File "/work/job/train.py", line 15 in step
  File "/work/job/train.py", line 20 in <module>
  File "<frozen runpy>", line 88 in _run_code
"""


def test_the_main_threads_innermost_user_frame_and_its_collective():
    stopped = parse(DUMP)
    assert stopped.where == "/work/job/train.py:15" and stopped.function == "step"
    assert stopped.in_collective, "waiting in backward, where DDP all-reduces"
    assert stopped.frames[0].endswith("graph.py:979 in _engine_run_backward")
    asleep = parse(DUMP.replace("/venv/lib/python3.11/site-packages/torch/autograd/graph.py",
                                "/work/job/wait.py"))  # fmt: skip
    assert asleep.where == "/work/job/wait.py:979" and not asleep.in_collective
    assert parse("") is None


#: On an accelerator autograd runs backward on a thread of its own, which runs Python only for
#: hooks: stuck in one, the main thread waits in backward and the hook's thread says where.
HOOK_DUMP = """Thread 0x00007f0000000003 (most recent call first):
  File "/usr/lib/python3.12/threading.py", line 359 in wait
  File "/usr/lib/python3.12/threading.py", line 655 in wait
  File "/venv/lib/python3.12/site-packages/torchdoctor/capture/_sampler.py", line 110 in _loop
  File "/usr/lib/python3.12/threading.py", line 1012 in run
  File "/usr/lib/python3.12/threading.py", line 1075 in _bootstrap_inner
  File "/usr/lib/python3.12/threading.py", line 1032 in _bootstrap

Thread 0x00007f0000000002 (most recent call first):
  File "/venv/lib/python3.12/site-packages/torchdoctor/capture/_timeline.py", line 116 in finished
  File "/venv/lib/python3.12/site-packages/torchdoctor/capture/_step_hooks.py", line 300 in hook

Current thread 0x00007f0000000001 (most recent call first):
  File "/venv/lib/python3.12/site-packages/torch/autograd/graph.py", line 829 in _engine_run_backward
  File "/venv/lib/python3.12/site-packages/torch/autograd/__init__.py", line 364 in backward
  File "/work/job/train.py", line 17 in <module>
"""


def test_a_thread_running_a_hook_is_kept_beside_the_main_thread_and_idle_ones_are_not():
    stopped = parse(HOOK_DUMP)
    assert stopped.where == "/work/job/train.py:17" and stopped.in_collective
    assert stopped.frames[0].endswith("graph.py:829 in _engine_run_backward")
    (hook,) = stopped.others  # the sampler waiting in threading is not kept
    assert hook[0].endswith("_timeline.py:116 in finished") and len(hook) == 2
    assert parse(DUMP).others == [["/work/job/train.py:4 in <lambda>",
                                   "/usr/lib/python3.11/threading.py:1002 in _bootstrap"]]  # fmt: skip


def test_the_main_thread_is_found_by_its_id_when_its_outermost_frames_were_cut():
    # faulthandler keeps 100 frames a thread: a deep main stack loses its <module> frame
    deep = HOOK_DUMP.replace('  File "/work/job/train.py", line 17 in <module>\n', "")
    assert parse(deep).frames[0].endswith("_timeline.py:116 in finished"), "the hook's thread"
    stopped = parse("main thread 0x00007f0000000001\n" + deep)
    assert stopped.frames[0].endswith("graph.py:829 in _engine_run_backward")
    assert stopped.others[0][0].endswith("_timeline.py:116 in finished")


def step(start_s: float, ms: float) -> LoggedStep:
    return LoggedStep("measure", {"forward": ms}, 1, int(start_s * 1e9))


def test_a_run_stalled_when_its_last_step_ended_long_before_the_stop():
    steps = [step(100.0 + i * 0.01, 10.0) for i in range(10)]  # 10 ms steps, the last at 100.1
    assert stalled_for(steps, 100.2) is None, "stopped while stepping"
    assert stalled_for(steps, 112.0) == pytest.approx(11.9, abs=0.01)
    slow = [step(100.0 + i, 900.0) for i in range(10)]  # 0.9 s steps: 20 of them is 18 s
    assert stalled_for(slow, 120.0) is None and stalled_for(slow, 130.0) is not None
    assert stalled_for([], 130.0) is None
