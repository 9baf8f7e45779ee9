"""The accelerator a run uses, through torch's device-agnostic API (docs/devices.md).

Every accelerator path of torchdoctor goes through ``torch.accelerator``, ``torch.Stream``,
``torch.Event`` and the generic memory functions, so CUDA, XPU, MPS, MTIA and PrivateUse1 devices
(Ascend NPU, the OpenReg reference backend) take the same path. Where torch is older than the
generic function, the device type's own module (``torch.<type>``) is asked, by name. What only CUDA
has (the device's name, bf16 support, NVML utilisation) is here too, and nowhere else: this is the
one module that reads ``torch.cuda``.
"""

from __future__ import annotations

from typing import Any

import torch

_MB = 2**20


def current_accelerator() -> torch.device | None:
    """The accelerator present here (``cuda:0``, ``openreg:0``), or ``None``."""
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    if accelerator is not None:
        if accelerator.is_available():
            device = accelerator.current_accelerator()
            return torch.device(device.type, accelerator.current_device_index())
        return None
    if torch.cuda.is_available():  # an older torch: CUDA is the one it knows
        return torch.device("cuda", torch.cuda.current_device())
    return None


def is_accelerator_available() -> bool:
    return current_accelerator() is not None


def synchronize(device: torch.device) -> None:
    """Wait until the device has finished all its work."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "synchronize"):
        accelerator.synchronize(device)
        return
    backend = _backend(device)
    if backend is not None and hasattr(backend, "synchronize"):
        backend.synchronize(device)


def synchronize_functions() -> list[tuple[Any, str]]:
    """``(owner, "synchronize")`` for each function a script may call to wait for the device:
    ``torch.accelerator.synchronize`` and the device type's own (``torch.cuda.synchronize``)."""
    found = []
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "synchronize"):
        found.append((accelerator, "synchronize"))
    device = current_accelerator()
    types = {device.type} if device is not None else set()
    types.add("cuda")  # a CUDA script's own call, watched even where no device is present
    for name in sorted(types):
        backend = getattr(torch, name, None)
        if backend is not None and callable(getattr(backend, "synchronize", None)):
            found.append((backend, "synchronize"))
    return found


# --- memory --------------------------------------------------------------------------------------


def reset_peak_memory(device: torch.device) -> bool:
    """Start a new peak of the device allocator's memory; ``False`` where the device has no
    memory statistics."""
    for owner in _memory_owners(device):
        reset = getattr(owner, "reset_peak_memory_stats", None)
        if reset is not None:
            try:
                reset(device)
                return True
            except (RuntimeError, NotImplementedError, TypeError, AttributeError):
                continue
    return False


def peak_memory_mb(device: torch.device) -> float | None:
    """The device allocator's peak since :func:`reset_peak_memory`, in MB; ``None`` where the
    device has no memory statistics."""
    for owner in _memory_owners(device):
        peak = getattr(owner, "max_memory_allocated", None)
        if peak is not None:
            try:
                return round(peak(device) / _MB, 1)
            except (RuntimeError, NotImplementedError, TypeError, AttributeError):
                continue
    return None


def total_memory_mb(device: torch.device) -> float | None:
    """The device's memory, in MB; ``None`` where the device does not say."""
    accelerator = getattr(torch, "accelerator", None)
    info = getattr(accelerator, "get_memory_info", None)
    if info is not None:
        try:
            _free, total = info(device)
            return total / _MB
        except (RuntimeError, NotImplementedError, TypeError, AttributeError):
            pass
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(device).total_memory / _MB
    return None


def _memory_owners(device: torch.device) -> list[Any]:
    owners = []
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "max_memory_allocated"):
        owners.append(accelerator)
    backend = _backend(device)
    if backend is not None:
        owners.append(backend)
    return owners


def _backend(device: torch.device) -> Any:
    """``torch.<type>`` for an accelerator device, or ``None``."""
    if device.type in ("cpu", "meta"):
        return None
    return getattr(torch, device.type, None)


# --- what only CUDA has --------------------------------------------------------------------------


def device_name(device: torch.device) -> str | None:
    """The accelerator's product name where the device says it (CUDA), else ``None``."""
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(device)
    return None


def bf16_supported(device: torch.device | None) -> bool:
    """Whether autocast can compute in bf16 on ``device`` (a CUDA device before Ampere cannot;
    CPUs and the other accelerators are taken to)."""
    if device is not None and device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return True


def nvml_handle() -> Any:
    """An NVML handle for the current CUDA device, or ``None`` (no CUDA, no pynvml)."""
    try:
        if not torch.cuda.is_available():
            return None
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    except Exception:  # noqa: BLE001 - NVML is optional; any failure means "not sampled"
        return None


def nvml_read(handle: Any) -> tuple[float, float]:
    """The device's utilisation (%) and used memory (MB), from NVML."""
    import pynvml

    util = pynvml.nvmlDeviceGetUtilizationRates(handle)
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return float(util.gpu), mem.used / _MB


# --- the host's memory: the machine's, or less inside a container ------------------------
#
# A container on a large host sees the host's memory in psutil.virtual_memory(): a 4 GiB
# container on a 256 GiB host would be told 250 GiB free. Its cgroup's limit and use are read
# where they are smaller.

#: A container's memory limit and use: cgroup v2, then v1.
CGROUP_FILES = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)


def _number(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def cgroup_limit() -> tuple[int, int | None] | None:
    """The container's memory limit and what it uses now, in bytes; ``None`` without one."""
    for limit_file, used_file in CGROUP_FILES:
        limit = _number(limit_file)
        if limit is not None:
            return limit, _number(used_file)
    return None


def available() -> int:
    """Bytes the process could still take: the host's available memory, or less where its
    container's limit leaves less."""
    import psutil

    free = int(psutil.virtual_memory().available)
    cgroup = cgroup_limit()
    if cgroup is not None and cgroup[1] is not None:
        free = min(free, max(cgroup[0] - cgroup[1], 0))
    return free
