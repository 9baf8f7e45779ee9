"""Snapshots of everything in torch that torchdoctor might patch or hook, to prove it restores it."""

from __future__ import annotations

import signal
import sys
import time
import types

import psutil


def warm_up_torch() -> None:
    """Import what torch imports lazily and which rebinds torch attributes as a side effect.

    Importing ``torch._dynamo`` (which an optimizer step may do) wraps ``torch.manual_seed``;
    doing it once up front keeps that out of every test's before/after comparison. The first
    ``torch.compile`` patches ``nn.Module.__init__`` and ``__setstate__`` for good (dynamo's
    generation tagging), the first ``torch.save`` of a tensor gives ``Tensor`` a
    ``__slotnames__``, and CUDA's lazy initialisation binds ``torch.cuda``'s device count,
    properties and generators: all torch's own one-time setup, done here first too.
    """
    import io

    import torch
    import torch._dynamo
    from torch._dynamo.mutation_guard import install_generation_tagging_init

    install_generation_tagging_init()
    torch.save(torch.zeros(1), io.BytesIO())
    if torch.cuda.is_available():  # CUDA's lazy init sets torch.cuda attributes once, for good
        torch.cuda.init()
        torch.cuda.get_device_properties(0)


def snapshot() -> dict[str, object]:
    """Identity of every attribute of the torch namespaces and classes we touch, and hook counts."""
    import multiprocessing.process as mp_process

    import torch
    import torch.distributed.checkpoint as dcp
    import torch.nn.modules.module as module_mod
    import torch.optim.optimizer as optimizer_mod
    import torch.utils.data.dataloader as dataloader_mod
    from torch.distributed.algorithms.join import Join
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    owners = {
        "torch": torch,
        "torch.Tensor": torch.Tensor,
        "torch.autograd": torch.autograd,
        "torch.nn.Module": torch.nn.Module,
        "torch.optim.Optimizer": torch.optim.Optimizer,
        # torch.compile turns off its argument checks process-wide (the compile trial's undo)
        "torch.distributions.Distribution": torch.distributions.Distribution,
        "DataLoader": torch.utils.data.DataLoader,
        "_BaseDataLoaderIter": dataloader_mod._BaseDataLoaderIter,
        "_SingleProcessDataLoaderIter": dataloader_mod._SingleProcessDataLoaderIter,
        "_MultiProcessingDataLoaderIter": dataloader_mod._MultiProcessingDataLoaderIter,
        "torch.cuda": torch.cuda,
        "DistributedDataParallel": torch.nn.parallel.DistributedDataParallel,
        "DataParallel": torch.nn.parallel.DataParallel,
        "multiprocessing.BaseProcess": mp_process.BaseProcess,
        # a launched rank's guards (capture._job_guards)
        "Join": Join,
        "Work": torch.distributed.distributed_c10d.Work,  # FSDP2's waits, timed
        "torch.distributed.checkpoint": dcp,
    }
    out: dict[str, object] = {}
    for owner_name, owner in owners.items():
        for attr, value in list(vars(owner).items()):
            if isinstance(value, types.ModuleType):
                continue  # torch imports its submodules lazily; that is not a patch
            out[f"{owner_name}.{attr}"] = id(value)
    hooks = {
        "global_forward_hooks": module_mod._global_forward_hooks,
        "global_forward_pre_hooks": module_mod._global_forward_pre_hooks,
        "global_backward_hooks": module_mod._global_backward_hooks,
        "global_optimizer_pre_hooks": optimizer_mod._global_optimizer_pre_hooks,
        "global_optimizer_post_hooks": optimizer_mod._global_optimizer_post_hooks,
    }
    for name, table in hooks.items():
        out[f"hooks.{name}"] = len(table)
    out["modes.function"] = len(_get_current_function_mode_stack())
    out["modes.dispatch"] = len(_get_current_dispatch_mode_stack())
    out["grad_enabled"] = torch.is_grad_enabled()
    out["autocast_cpu"] = torch.is_autocast_enabled("cpu")  # the amp trial enters it
    # inherited by every process a later test starts: an ignored or blocked SIGINT there
    # cannot be Ctrl-C'd
    out["sigint"] = signal.getsignal(signal.SIGINT)
    out["sigmask"] = sorted(signal.pthread_sigmask(signal.SIG_BLOCK, []))
    out["num_threads"] = torch.get_num_threads()  # the worker sweep and --fix set it
    # fix's patched-source import hook
    out["sys.meta_path"] = [
        id(f) for f in sys.meta_path if type(f).__module__.startswith("torchdoctor")
    ]
    return out


def wait_for_children(proc: psutil.Process, timeout_s: float) -> list[str]:
    """Child processes still alive after ``timeout_s`` (workers may take a moment to exit)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [c for c in proc.children(recursive=True) if _alive(c)]
        if not alive or time.monotonic() > deadline:
            return [f"{c.pid}:{_name(c)}" for c in alive]
        time.sleep(0.1)


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _name(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline()[:3])
    except psutil.Error:
        return "?"
