"""What the script's data-parallel wrappers do wrong (docs/distributed.md).

Where each wrapper is built is noted by wrapping ``DataParallel.__init__`` and
``DistributedDataParallel.__init__`` (through the Patcher); the rest is read off the modules,
the main DataLoader and the steps: DataParallel in use, DDP without a DistributedSampler, a
rank on another rank's device, accumulation that all-reduces every micro-step, and
``find_unused_parameters=True`` with no unused parameter.
"""

from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.parallel import DataParallel, DistributedDataParallel

from ..loader import sampler_chain
from ..record import Finding, split_where
from ._collectives import CollectiveWatch
from ._frames import user_site
from ._patch import Patcher


class ParallelWatch:
    """The data-parallel wrappers the script builds and how its steps use them."""

    def __init__(self) -> None:
        self._sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        #: Measured steps' DDP forwards that prepared an all-reduce (not under ``no_sync()``).
        self.synced_forwards = 0
        #: Measured steps' DDP forwards under ``no_sync()`` (the script accumulates already).
        self.unsynced_forwards = 0
        #: After the first measured backward of a DDP with ``find_unused_parameters=True``:
        #: whether every parameter got a gradient.
        self.all_params_used: bool | None = None
        #: The collectives the script calls itself (timed in a launched rank only).
        self.collectives = CollectiveWatch()

    def install(self, patcher: Patcher, collectives: bool = False) -> None:
        for cls in (DataParallel, DistributedDataParallel):
            patcher.set(cls, "__init__", self._noting_site(cls.__init__))
        if collectives:
            self.collectives.install(patcher)

    def _noting_site(self, original: Any) -> Any:
        # ``self`` positional-only: DDP is often built as DistributedDataParallel(module=model).
        @functools.wraps(original)
        def init(wrapper, /, *args, **kwargs):
            site = user_site(sys._getframe(1))
            if site is not None:
                self._sites[wrapper] = f"{site.file}:{site.line}"
            return original(wrapper, *args, **kwargs)

        return init

    def forward_starting(self, module: Any, measuring: bool) -> None:
        if measuring and isinstance(module, DistributedDataParallel) and torch.is_grad_enabled():
            if module.require_backward_grad_sync:
                self.synced_forwards += 1
            else:
                self.unsynced_forwards += 1

    def optimizer_stepping(self, roots: Callable[[], list[Any]]) -> None:
        """Once, in a measured step: do the gradients show unused parameters? (``roots`` is
        called then only: listing the outermost modules each step would cost the step.)"""
        if self.all_params_used is not None:
            return
        self.all_params_used = True  # decided now, whatever the modules: never asked again
        for module in roots():
            if isinstance(module, DistributedDataParallel) and module.find_unused_parameters:
                params = [p for p in module.parameters() if p.requires_grad]
                self.all_params_used = all(p.grad is not None for p in params)

    def site(self, module: Any) -> str | None:
        return self._sites.get(module)

    def ddp_settings(self, roots: list[Any]) -> dict[str, Any]:
        """The process group's backend and the first DDP module's settings, for the record's
        ``seen`` (the job's section and advice)."""
        out: dict[str, Any] = {}
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            out["backend"] = str(dist.get_backend())
        out.update(fsdp_settings(roots))
        for module in roots:
            if isinstance(module, DistributedDataParallel):
                return {
                    **out,
                    "ddp_at": self.site(module) or "",
                    "ddp_bucket_cap_mb": round(module.bucket_bytes_cap / 2**20, 3),
                    "ddp_gradient_as_bucket_view": bool(module.gradient_as_bucket_view),
                    # what the job does already, so no advice repeats it
                    "ddp_comm_hook": ", ".join(
                        getattr(hook, "__qualname__", str(hook))
                        for hook, _ in getattr(module, "_comm_hooks", [])
                    ),
                    "ddp_no_sync_forwards": self.unsynced_forwards,
                    # the gradients it all-reduces a step (the projection to more ranks)
                    "ddp_grad_bytes": sum(
                        p.numel() * p.element_size() for p in module.parameters() if p.requires_grad
                    ),
                }
        return out

    def findings(
        self,
        roots: list[Any],
        loader: Any,
        loader_at: str | None,
        world_size: int,
        local_rank: int,
        measured_steps: int,
    ) -> list[Finding]:
        out: list[Finding] = []
        ddp = [m for m in roots if isinstance(m, DistributedDataParallel)]
        for module in roots:
            if isinstance(module, DataParallel):
                out.append(_finding("ddp.data-parallel", self.site(module), _DATA_PARALLEL))
        if ddp and world_size > 1 and loader is not None and not _sharded(loader):
            out.append(
                _finding(
                    "ddp.no-distributed-sampler",
                    loader_at or self.site(ddp[0]),
                    _NO_SAMPLER,
                )
            )
        for module in ddp:
            text = device_mismatch(local_rank, _param_devices(module), _device_count())
            if text is not None:
                out.append(_finding("ddp.device", self.site(module), (text, _DEVICE_FIX)))
        if ddp and measured_steps and self.synced_forwards > measured_steps:
            per_step = self.synced_forwards / measured_steps
            title = (
                f"gradient accumulation all-reduces every micro-step: {per_step:.1f} synced "
                "forward/backward passes per optimizer step, where only the last needs it"
            )
            out.append(_finding("ddp.accumulation-sync", self.site(ddp[0]), (title, _NO_SYNC_FIX)))
        if any(m.find_unused_parameters for m in ddp) and self.all_params_used:
            out.append(_finding("ddp.find-unused-parameters", self.site(ddp[0]), _FIND_UNUSED))
        return out


def device_mismatch(local_rank: int, devices: list[str], device_count: int) -> str | None:
    """A rank whose parameters sit on another rank's accelerator (no ``set_device(local_rank)``).

    ``devices`` are the parameters' device strings (``"cuda:0"``); CPU ranks never mismatch.
    """
    if device_count <= 1:
        return None
    indices = {int(d.split(":", 1)[1]) for d in devices if ":" in d}
    wrong = sorted(i for i in indices if i != local_rank)
    if not wrong:
        return None
    return (
        f"local rank {local_rank} keeps its model on device {wrong[0]}: ranks share a device "
        f"(and device {wrong[0]} holds several ranks' memory) while device {local_rank} idles"
    )


def _sharded(loader: Any) -> bool:
    """Whether the loader's sampler chain splits the data across ranks."""
    if isinstance(loader.dataset, torch.utils.data.IterableDataset):
        return True  # an iterable dataset shards itself (or not): nothing to tell here
    if isinstance(loader.dataset, torch.utils.data.Subset):
        return True  # a shard made by hand (Subset(data, range(rank, n, world)))
    for _, sampler in sampler_chain(loader):
        if hasattr(sampler, "num_replicas") or hasattr(sampler, "num_processes"):
            return True
    return False


def _param_devices(module: Any) -> list[str]:
    return sorted({str(p.device) for p in module.parameters()})


def _device_count() -> int:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return accelerator.device_count()
    return 0


def _finding(kind: str, where: str | None, text: tuple[str, str]) -> Finding:
    file, line = split_where(where)
    title, fix = text
    return Finding(kind=kind, title=title, fix=fix, file=file, line=line, severity="warning")  # type: ignore[arg-type]


_DATA_PARALLEL = (
    "nn.DataParallel runs every device from one process: one Python thread drives them all, "
    "the model is copied to each device on every step and outputs gather on the first",
    "use DistributedDataParallel with one process per device: launch with "
    "`torchrun --nproc-per-node N train.py`, call init_process_group and "
    "torch.accelerator.set_device_index(local_rank), wrap with DDP(model, "
    "device_ids=[local_rank])",
)
_NO_SAMPLER = (
    "DDP without a DistributedSampler: every rank draws the same batches, so N ranks do the "
    "work of one",
    "DataLoader(dataset, sampler=DistributedSampler(dataset), ...) and call "
    "sampler.set_epoch(epoch) at the start of each epoch",
)
_DEVICE_FIX = (
    "torch.accelerator.set_device_index(local_rank) (local_rank = "
    "int(os.environ['LOCAL_RANK'])) before building the model, and DDP(model, "
    "device_ids=[local_rank])"
)
_NO_SYNC_FIX = (
    "run all but the last micro-step under `with ddp_model.no_sync():` so gradients are "
    "all-reduced once per optimizer step"
)
_FIND_UNUSED = (
    "find_unused_parameters=True, yet every parameter got a gradient: DDP walks the autograd "
    "graph after each forward for nothing",
    "DDP(model, find_unused_parameters=False) (the default)",
)


def fsdp_settings(roots: list[Any]) -> dict[str, Any]:
    """What FSDP2's units do already (``fully_shard``'s settings), so no advice repeats it: how
    many units reshard after forward, and the parameters' dtype in their mixed-precision policy.
    Read off torch's private state: an attribute torch renamed leaves them out."""
    # A module of FSDP2's has its class from torch.distributed.fsdp, imported by then: importing
    # it here for a script that never did cost every run 0.44 s of its start.
    FSDPModule = getattr(sys.modules.get("torch.distributed.fsdp"), "FSDPModule", None)
    if FSDPModule is None:
        return {}
    units = kept = 0
    dtypes: set[str] = set()
    for root in roots:
        for module in root.modules() if isinstance(root, torch.nn.Module) else []:
            if not isinstance(module, FSDPModule):
                continue
            try:
                groups = module._get_fsdp_state()._fsdp_param_groups  # type: ignore[attr-defined]
                for group in groups:
                    units += 1
                    kept += not group._reshard_after_forward
                    if group.mp_policy.param_dtype is not None:
                        dtypes.add(str(group.mp_policy.param_dtype).replace("torch.", ""))
            except AttributeError:
                return {}
    if not units:
        return {}
    return {"fsdp_units": units, "fsdp_kept_after_forward": kept,
            "fsdp_param_dtype": ", ".join(sorted(dtypes))}  # fmt: skip
