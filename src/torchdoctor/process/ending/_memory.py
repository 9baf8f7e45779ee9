"""Out of memory as the evidence of an ending: which memory ran out, how much was asked for, and
at which line of the script (issue "Memory joined with speed", item 4).

An error is out of memory when it is a device's (``torch.OutOfMemoryError``, CUDA's, or a
backend's "out of memory" message) or the host's: Python's ``MemoryError``, or the CPU allocator's
refusal (``RuntimeError: [enforce fail at alloc_cpu.cpp] ... DefaultCPUAllocator: can't allocate
memory: you tried to allocate 1125899906842624 bytes``). Recognised by names and messages, so this
does not import torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ...record import TOO_LARGE

#: Messages of a host allocation refused (the CPU allocator's words, glibc's errno text).
HOST_WORDS = ("can't allocate memory", "cannot allocate memory")
#: Messages of a device that ran out (CUDA, ROCm, MPS, XPU, PrivateUse1 backends say so).
DEVICE_WORDS = ("out of memory",)

_BYTES = re.compile(r"tried to allocate (\d+) bytes", re.IGNORECASE)
_SIZED = re.compile(r"tried to allocate ([\d.]+ ?[KMGTP]i?B)", re.IGNORECASE)
#: The script's own ``raise SomeError(...)`` (not a bare ``raise`` passing torch's on).
_RAISED = re.compile(r"raise\s+[\w.]+\s*\(")


@dataclass(frozen=True)
class OutOfMemory:
    """An out-of-memory error: the memory that ran out, the size asked for (in words, when the
    message says it), and the script's line that asked (``file:line``, and its statement)."""

    memory: str  # "host" or "device"
    asked: str = ""
    where: str = ""
    statement: str = ""
    #: Bytes the training held on that memory when it ran out, by category (``parameters``,
    #: ``gradients``, ``optimizer state``); the rest was activations and temporaries.
    held: tuple[tuple[str, int], ...] = ()
    #: The largest batch that fits, in words, where a counted step tells it
    #: (:func:`batch_that_fits`).
    fits: str = ""
    #: The size asked for, in bytes, where the message says it (``asked`` in figures).
    asked_bytes: int | None = field(default=None, compare=False)

    def words(self) -> str:
        """``the script ran out of device memory at train.py:12 (`x = ...`), asking for 2.00
        GiB``."""
        text = f"the script ran out of {self.memory} memory"
        if self.where:
            text += f" at {self.where}"
            if self.statement:
                text += f" (`{self.statement}`)"
        if self.asked:
            text += f", asking for {self.asked}"
        held = [f"{name} {byte_words(n)}" for name, n in self.held if n]
        if held:
            text += f"; it held {', '.join(held)} there (the rest: activations and temporaries)"
        if self.fits:
            text += f"; {self.fits}"
        return text


def out_of_memory(
    error: BaseException | None,
    user_line: Callable[[BaseException], tuple[str, str]] = lambda e: ("", ""),
) -> OutOfMemory | None:
    """``error`` as an :class:`OutOfMemory`, or ``None`` when it is another error.
    ``user_line`` finds the innermost line of the script in its traceback (``file:line``, its
    statement)."""
    if error is None:
        return None
    names = {cls.__name__ for cls in type(error).__mro__}
    message = str(error)
    lowered = message.lower()
    if "OutOfMemoryError" in names or (
        "RuntimeError" in names and any(w in lowered for w in DEVICE_WORDS)
    ):
        memory = "device"
    elif "MemoryError" in names or any(w in lowered for w in HOST_WORDS):
        memory = "host"
    else:
        return None
    where, statement = user_line(error)
    if _RAISED.match(statement):
        return None  # `raise MemoryError("cache full")`: the script's own error, no allocation
    nbytes = _asked_bytes(message)
    words = byte_words(nbytes) if _BYTES.search(message) and nbytes else _sized(message)
    return OutOfMemory(memory, words, where, statement, asked_bytes=nbytes)


_UNITS = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40, "PB": 2**50}


def _sized(message: str) -> str:
    found = _SIZED.search(message)
    return found.group(1) if found else ""


def _asked_bytes(message: str) -> int | None:
    """The size the allocation asked for, in bytes (``None`` when the message does not say)."""
    found = _BYTES.search(message)
    if found:
        return int(found.group(1))
    words = _sized(message).replace(" ", "").upper().replace("IB", "B")
    unit = next((u for u in ("KB", "MB", "GB", "TB", "PB") if words.endswith(u)), None)
    try:
        return int(float(words[: -len(unit)]) * _UNITS[unit]) if unit else None
    except ValueError:
        return None


def too_large(oom: OutOfMemory, capacity: int | None) -> str:
    """Words for one allocation larger than all of ``capacity`` (no batch fits it), or ``""``."""
    if not oom.asked_bytes or not capacity or oom.asked_bytes <= capacity:
        return ""
    return (
        f"that one allocation is {TOO_LARGE} {oom.memory} memory ({byte_words(capacity)}): "
        "check the shape of the tensor made at that line"
    )


def byte_words(n: int) -> str:
    """``1125899906842624`` as ``1.0 PiB``; ``512`` as ``512 B``."""
    size, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024 or unit == "PiB":
            break
        size /= 1024
    return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"


#: Of the memory there is, the share a step may fill in the estimate of the batch that fits (the
#: allocator's fragmentation, the framework's own buffers).
FIT_SHARE = 0.9


def batch_that_fits(
    rows: int | None,
    fixed: int,
    per_step: int,
    capacity: int | None,
    memory: str,
    temporaries: bool = False,
    limit: str = "",
) -> str:
    """The largest batch that fits, in words, from a step counted at ``rows`` samples: ``fixed``
    bytes whatever the batch (parameters, gradients, optimizer state), ``per_step`` bytes that
    grow with it (the activations saved for backward, and with ``temporaries`` the temporaries
    a peak told), in :data:`FIT_SHARE` of ``capacity`` (``limit``: what bounds it, when not the
    whole ``memory``: a ``ulimit -v``, a container's limit); ``""`` when a figure is missing."""
    size = byte_words(capacity or 0)
    bound = f"{size} {limit}" if limit else f"{memory} memory's {size}"
    if not rows or rows < 1 or per_step <= 0 or not capacity:
        return ""
    per_sample = per_step / rows
    room = FIT_SHARE * capacity - fixed
    if room <= 0:
        return (
            f"the parameters, gradients and optimizer state alone ({byte_words(fixed)}) fill "
            f"{FIT_SHARE:.0%} of the {bound}: no batch fits; "
            "shard them (FSDP2) or use a smaller model"
        )
    fits = int(room // per_sample)
    kinds = "activations and temporaries" if temporaries else "activations"
    unsure = "" if temporaries else " (its temporaries not counted here: fewer fit)"
    return (
        f"the largest batch that fits is about {fits:,} samples{unsure}, estimated from a step "
        f"counted at {rows}: {byte_words(int(per_sample))} a sample of {kinds}, "
        f"{byte_words(fixed)} for the model and its optimizer, in {FIT_SHARE:.0%} of the "
        f"{bound}; a step of {rows} samples fitted"
    )


def host_capacity() -> tuple[int, str] | None:
    """The host memory this process may use, in bytes, and what bounds it when it is less than
    the machine's (``""`` for the machine's): a container's limit (cgroup), or an address-space
    limit (``ulimit -v``: what the process holds plus the address space it has left)."""
    try:
        import psutil

        from ..._devices import cgroup_limit  # torch is loaded where a run ends

        best = (int(psutil.virtual_memory().total), "")
        cgroup = cgroup_limit()
        if cgroup is not None and cgroup[0] < best[0]:
            best = (cgroup[0], "of the container's memory limit (cgroup)")
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY and soft > 0:
            info = psutil.Process().memory_info()
            room = info.rss + max(0, soft - info.vms)
            if room < best[0]:
                best = (room, f"that the address-space limit (ulimit -v {soft // 1024}) left it")
        return best
    except Exception:  # noqa: BLE001 - the ending is told without it
        return None
