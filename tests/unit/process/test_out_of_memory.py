"""Out of memory is its own ending (``process.ending``): recognised from the error the script
raised (a device's or the host's), with the memory, the size asked for and the script's line; its
own status and exit status; and a verdict that says to make the step fit before any speed advice.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from torchdoctor._errors import EXIT_OUT_OF_MEMORY, EXIT_SCRIPT_ERROR
from torchdoctor.analysis.verdict import summarise
from torchdoctor.process.ending import (
    RAISED,
    STOPPED,
    OutOfMemory,
    ScriptEnd,
    decide_script,
    out_of_memory,
    settle,
)
from torchdoctor.record import (
    COMPLETE,
    OUT_OF_MEMORY,
    SCRIPT_ERROR,
    STATUS_PRECEDENCE,
    RunRecord,
)

CPU_REFUSED = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 1125899906842624 bytes. Error code 12 (Cannot allocate memory)"
)
CUDA_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of "
    "which 1.19 GiB is free."
)


class OutOfMemoryError(RuntimeError):
    """Named as torch's is (torch.OutOfMemoryError): recognised by name, torch not imported."""


def at_line(error: BaseException) -> tuple[str, str]:
    return "train.py:12", "x = model(batch)"


def test_a_device_or_a_host_that_ran_out_is_recognised_and_another_error_is_not():
    device = out_of_memory(OutOfMemoryError(CUDA_OOM), at_line)
    assert device == OutOfMemory("device", "2.00 GiB", "train.py:12", "x = model(batch)")
    assert out_of_memory(RuntimeError(CPU_REFUSED)) == OutOfMemory("host", "1.0 PiB")
    assert out_of_memory(MemoryError()) == OutOfMemory("host")
    # another backend's words (MPS, a PrivateUse1 device) without torch's class
    assert out_of_memory(
        RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)")
    ).memory == ("device")
    assert out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) is None
    assert out_of_memory(ValueError("out of memory")) is None  # not torch's nor the host's
    assert out_of_memory(None) is None
    # the script's own `raise MemoryError("cache full")` asked for no memory: its own error;
    # a bare `raise` passing torch's on is still torch's
    own = out_of_memory(
        MemoryError("shard cache full"), lambda e: ("t.py:7", "raise MemoryError(f'x')")
    )
    assert own is None
    passed_on = out_of_memory(OutOfMemoryError(CUDA_OOM), lambda e: ("t.py:9", "raise"))
    assert passed_on is not None and passed_on.memory == "device"
    assert device.words() == (
        "the script ran out of device memory at train.py:12 (`x = model(batch)`), asking for "
        "2.00 GiB"
    )


def test_out_of_memory_is_its_own_ending_with_its_own_exit_status():
    oom = OutOfMemory("host", "1.0 PiB", "train.py:7", "f = torch.empty(2**50)")
    ending = decide_script(
        ScriptEnd(RAISED, 13, {"optimizer_steps": 16}, 3, 20, error="RuntimeError",
                  out_of_memory=oom)
    )  # fmt: skip
    assert (ending.status, ending.exit_status, ending.cause) == (
        OUT_OF_MEMORY,
        EXIT_OUT_OF_MEMORY,
        "out-of-memory",
    )
    assert ending.words == oom.words()
    assert ending.notes[0].startswith(f"{oom.words()} after 13 measured steps; torchdoctor saw")
    # another error is the script's; out of memory after the measurement was done does not
    # change a complete run
    other = decide_script(ScriptEnd(RAISED, 13, {}, 3, 20, error="ValueError"))
    assert (other.status, other.exit_status) == (SCRIPT_ERROR, EXIT_SCRIPT_ERROR)
    done = decide_script(ScriptEnd(STOPPED, 20, {}, 3, 20, error="", out_of_memory=oom))
    assert done.status == COMPLETE
    # in a job, a rank out of memory names the job before another's error
    assert STATUS_PRECEDENCE.index(OUT_OF_MEMORY) < STATUS_PRECEDENCE.index(SCRIPT_ERROR)


def test_the_verdict_of_a_run_out_of_memory_says_to_fit_the_step_first():
    # The script: a batch grown each step until one did not fit, 13 steps measured,
    # compute-bound: never "a batch size that fills the device".
    record = RunRecord()
    for _ in range(13):
        record.steps.add_step({"forward": 6.0, "backward": 12.0, "optimizer": 1.0, "other": 0.2}, 1)
    oom = OutOfMemory("device", "2.00 GiB", "train.py:12")
    settle(record, decide_script(
        ScriptEnd(RAISED, 13, {"optimizer_steps": 16}, 3, 20, error="OutOfMemoryError",
                  out_of_memory=oom)
    ))  # fmt: skip
    summarise(record)
    assert record.status == OUT_OF_MEMORY
    assert record.verdict.next.startswith("make the step fit first: a smaller batch size")
    assert "fills the device" not in record.verdict.next
    assert "torch.compile" in record.verdict.next  # the speed advice follows


def test_what_the_training_held_is_said_by_category():
    held = (("parameters", 2**30), ("gradients", 0), ("optimizer state", 2**31))
    oom = OutOfMemory("device", "2.00 GiB", "train.py:12", held=held)
    assert oom.words() == (
        "the script ran out of device memory at train.py:12, asking for 2.00 GiB; it held "
        "parameters 1.0 GiB, optimizer state 2.0 GiB there (the rest: activations and "
        "temporaries)"
    )


def test_a_rank_out_of_memory_ends_its_job_so_and_is_named():
    # A 2-rank gloo job whose rank 1 ran out of host memory at step 9 read "ENDED EARLY uneven
    # inputs: rank 1 ran out of batches", exit 0, before the launcher knew the status.
    from torchdoctor._errors import EXIT_OUT_OF_MEMORY
    from torchdoctor.process.ending import JobEnd, decide_job
    from torchdoctor.process.rank_endings import describe, first_cause, rank_ends
    from torchdoctor.process.stream import Final, Hello, StreamState

    def rank(n: int, status: str, at: float, traceback: list[str], words: str = ""):
        state = StreamState(hello=Hello(rank=n, local_rank=n, world_size=2, pid=1))
        record = {"status": status, "seen": {"optimizer_steps": 9}, "notes": []}
        if words:
            record["ending"] = {"status": status, "exit_status": 6, "cause": "out-of-memory",
                                "words": words}  # fmt: skip
        state.final, state.final_at = Final(record, exit_status=1, traceback=traceback), at
        return state

    words = "the script ran out of host memory at train.py:14, asking for 1.0 PiB"
    lost = ["RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer\n"]
    ends = rank_ends(
        [rank(0, SCRIPT_ERROR, 2.0, lost), rank(1, OUT_OF_MEMORY, 1.0, ["RuntimeError: x"], words)],
        {},
        None,
    )
    cause = first_cause(ends)
    assert cause is not None and cause.rank == 1 and cause.ending == "raised"
    said = describe(ends)[1]
    assert said == "ran out of host memory at train.py:14, asking for 1.0 PiB at step 9", said
    job = decide_job(JobEnd(cause_status=OUT_OF_MEMORY, cause_words=f"rank 1 {said}"), True)
    assert (job.status, job.exit_status) == (OUT_OF_MEMORY, EXIT_OUT_OF_MEMORY)


def test_the_batch_that_fits_is_estimated_from_a_counted_step():
    from torchdoctor.process.ending import batch_that_fits

    gib = 2**30
    # 32 samples saved 2 GiB (64 MiB a sample); the model and Adam hold 1 GiB; 80 GiB in all:
    # 90% of it less 1 GiB leaves 71 GiB, 1136 samples.
    words = batch_that_fits(32, 1 * gib, 2 * gib, 80 * gib, "device", temporaries=True)
    assert words.startswith("the largest batch that fits is about 1,136 samples, estimated")
    assert "a step of 32 samples fitted" in words and "64.0 MiB a sample of act" in words
    assert "fewer fit" in batch_that_fits(32, 1 * gib, 2 * gib, 80 * gib, "host")
    full = batch_that_fits(32, 79 * gib, 2 * gib, 80 * gib, "device")
    assert "no batch fits" in full and "FSDP2" in full
    assert batch_that_fits(None, gib, gib, 80 * gib, "device") == ""  # no batch seen
    assert batch_that_fits(32, gib, gib, None, "device") == ""  # no capacity told
    oom = OutOfMemory("device", "2.00 GiB", "train.py:12", fits=words)
    assert oom.words().endswith(words)


def test_the_host_memory_that_fits_is_what_a_ulimit_or_a_container_leaves(monkeypatch, tmp_path):
    """The estimate divided the machine's 23.5 GiB where `ulimit -v 6000000` left 5 GiB: it
    said 643,808 samples fit where 262,144 ran out."""
    import resource

    import psutil

    from torchdoctor import _devices as _host_memory
    from torchdoctor.process.ending import batch_that_fits, host_capacity

    total = psutil.virtual_memory().total
    none = (str(tmp_path / "none"), str(tmp_path / "none"))
    monkeypatch.setattr(_host_memory, "CGROUP_FILES", (none,))
    monkeypatch.setattr(resource, "getrlimit", lambda _: (resource.RLIM_INFINITY,) * 2)
    assert host_capacity() == (total, "")
    assert _host_memory.available() == pytest.approx(psutil.virtual_memory().available, rel=0.1)
    (tmp_path / "memory.max").write_text(f"{total // 4}\n")
    (tmp_path / "memory.current").write_text(f"{total // 8}\n")
    cgroup = (str(tmp_path / "memory.max"), str(tmp_path / "memory.current"))
    monkeypatch.setattr(_host_memory, "CGROUP_FILES", (cgroup,))
    assert host_capacity() == (total // 4, "of the container's memory limit (cgroup)")
    assert _host_memory.available() <= total // 8  # the container's, not the host's
    info = psutil.Process().memory_info()
    limit = info.vms + 2**30  # a GiB of address space left
    monkeypatch.setattr(resource, "getrlimit", lambda _: (limit, resource.RLIM_INFINITY))
    capacity, words = host_capacity()
    assert abs(capacity - (info.rss + 2**30)) < 2**28 and "ulimit -v" in words
    said = batch_that_fits(32, 0, 32 * 2**20, capacity, "host", limit=words)
    assert f"that the address-space limit (ulimit -v {limit // 1024}) left it" in said


def test_a_step_accumulating_micro_batches_is_estimated_from_one_pass():
    """Four micro-batches of 32 held 4 GiB of activations in all, 1 GiB at a time, and the peak
    was 3 GiB: the temporaries are the peak beyond the model and one pass (1 GiB), not beyond
    all four (none), which told a batch twice as large."""
    from types import SimpleNamespace

    from torchdoctor.process import build
    from torchdoctor.record import MemorySplit

    gib = 2**30
    split = MemorySplit(
        parameters=gib // 2, gradients=gib // 2, optimizer_state=0, activations=4 * gib,
        device="cuda:0", peak=3 * gib, rows=32, first_pass=gib,
    )  # fmt: skip
    session = SimpleNamespace(data=SimpleNamespace(memory_split=split))
    words = build._fits(session, "device", (80 * gib, ""))
    # 90% of 80 GiB less 1 GiB of model: 71 GiB; 2 GiB (one pass and its temporaries) a 32
    assert "about 1,136 samples" in words and "64.0 MiB a sample of activations and temp" in words


def test_one_allocation_larger_than_the_whole_memory_is_told_to_check_its_shape():
    """`torch.empty(1 << 40)` (4 TiB on a 23.5 GiB host) was told the batch that fits and to
    lower the batch size: no batch makes one such tensor fit."""
    from torchdoctor.process.ending import too_large

    oom = out_of_memory(RuntimeError(CPU_REFUSED), at_line)  # 1.0 PiB
    assert oom.asked_bytes == 2**50
    assert out_of_memory(OutOfMemoryError(CUDA_OOM)).asked_bytes == 2 * 2**30  # "2.00 GiB"
    words = too_large(oom, 24 * 2**30)
    assert words == (
        "that one allocation is more than the whole host memory (24.0 GiB): check the shape of "
        "the tensor made at that line"
    )
    assert too_large(out_of_memory(OutOfMemoryError(CUDA_OOM)), 80 * 2**30) == ""
    record = RunRecord()
    for _ in range(13):
        record.steps.add_step({"forward": 6.0, "backward": 12.0, "optimizer": 1.0}, 1)
    settle(record, decide_script(
        ScriptEnd(RAISED, 13, {"optimizer_steps": 16}, 3, 20, error="RuntimeError",
                  out_of_memory=replace(oom, fits=words))
    ))  # fmt: skip
    summarise(record)
    assert record.verdict.next.startswith("check the shape of the tensor"), record.verdict.next
    assert "smaller batch size" not in record.verdict.next


def test_out_of_memory_in_the_warm_up_is_told_the_steps_that_fitted():
    """13 steps of the warm-up fitted, then one ran out: "check that the script reaches
    optimizer.step()" was said."""
    record = RunRecord()
    record.seen = {"optimizer_steps": 13}
    settle(record, decide_script(
        ScriptEnd(RAISED, 0, {"optimizer_steps": 13}, 20, 8, error="RuntimeError",
                  out_of_memory=OutOfMemory("host", "4.0 GiB", "train.py:12"))
    ))  # fmt: skip
    summarise(record)
    assert record.status == OUT_OF_MEMORY
    assert "13 step(s) of the warm-up fitted" in record.verdict.why, record.verdict
    assert record.verdict.next.startswith("make the step fit first")
