"""The patches the capture puts on torch: DataLoader, ``Tensor.to``/``.cuda`` and autograd.

Each wrapper hands its call to the session (:mod:`._session`), which times it and runs the phase
table; every patch goes through the session's ``Patcher`` and is undone by its restore.
"""

from __future__ import annotations

import functools
import inspect
import multiprocessing.process as _mp_process
import sys
from threading import get_ident
from typing import TYPE_CHECKING, Any

import torch
import torch.utils.data.dataloader as _dl_mod
from torch.utils.data import DataLoader

from ._frames import is_user_file, user_site
from ._patch import passes_through
from ._script_state import call_site
from ._whole import built_key, loader_key

if TYPE_CHECKING:
    from ._session import CaptureSession


def patch_torch(session: CaptureSession) -> None:
    """Wrap the DataLoader's construction and iteration, batch copies, and autograd's entries."""
    p = session.patcher
    hooks = session.hooks  # what the wrappers call in every step: bound once

    orig_iter = DataLoader.__iter__
    orig_init = DataLoader.__init__
    orig_next = session.original_next = _dl_mod._BaseDataLoaderIter.__next__
    orig_to = torch.Tensor.to
    orig_cuda = torch.Tensor.cuda
    orig_backward = torch.autograd.backward
    orig_grad = torch.autograd.grad
    orig_optimizer_init = torch.optim.Optimizer.__init__
    orig_process_start = _mp_process.BaseProcess.start

    init_signature = inspect.signature(orig_init)
    # Every wrapper takes its leading argument positionally only and passes the rest through
    # untouched, so no keyword the original accepts can collide with a name of ours
    # (tests/unit/capture/test_signatures.py calls each one every way its original accepts).
    # Outside the script's own thread (DataLoader workers forked from it, helper threads) each
    # is the original: nothing is measured there and nothing is raised.

    # functools.wraps: ``inspect.signature`` of each wrapper is its original's (Lightning reads
    # DataLoader.__init__'s parameter names to re-create a loader with its sampler).
    @functools.wraps(orig_init)
    def dataloader_init(loader, /, *args, **kwargs):
        if hooks.foreign():
            return orig_init(loader, *args, **kwargs)
        if not hooks.phase.owns_loaders:
            if session.options.loader_overrides:
                # Name every argument so an override cannot collide with a positional one.
                bound = init_signature.bind(loader, *args, **kwargs).arguments
                bound.pop("self")
                extra = bound.pop("kwargs", {})
                args, kwargs = (), {**bound, **extra}
                kwargs.update(hooks.overrides_for(kwargs))
            site = user_site(sys._getframe(1))
            if site is not None:
                session.loaders.created(loader, f"{site.file}:{site.line}")
            built = orig_init(loader, *args, **kwargs)
            hooks.whole.loader_built(built_key(loader))
            return built
        return orig_init(loader, *args, **kwargs)

    @functools.wraps(orig_iter)
    def dataloader_iter(loader, /):
        if hooks.foreign():
            return orig_iter(loader)
        started, whole = session.clock_ns(), hooks.whole
        whole.loading = True  # workers starting: an epoch boundary's own time
        try:
            it = session.passes.new_pass(loader, orig_iter)  # a served pass: without workers
        finally:
            whole.loading = False
        whole.iterator_made(loader_key(it), started)
        hooks.check_done()
        if not hooks.phase.owns_loaders:  # else: torchdoctor's own clones
            session.loaders.iterated(loader, it)
        return it

    # The wrappers called in every step test ``hooks.foreign()`` inlined (a Python call fewer).
    @functools.wraps(orig_next)
    def iterator_next(it, /):
        if get_ident() != hooks._owner_thread:
            return orig_next(it)
        return hooks.serve_batch(it, orig_next)

    # A batch's copy, or any copy a batch builder makes, in the script's thread: timed.
    @passes_through
    @functools.wraps(orig_to)
    def tensor_to(tensor, /, *args, **kwargs):
        ids = hooks.batch_ids
        if (hooks.building or (ids and id(tensor) in ids)) and (get_ident() == hooks._owner_thread):
            return hooks.time_part("to_device", orig_to, tensor, *args, **kwargs)
        return orig_to(tensor, *args, **kwargs)

    @passes_through
    @functools.wraps(orig_cuda)
    def tensor_cuda(tensor, /, *args, **kwargs):
        ids = hooks.batch_ids
        if (hooks.building or (ids and id(tensor) in ids)) and (get_ident() == hooks._owner_thread):
            return hooks.time_part("to_device", orig_cuda, tensor, *args, **kwargs)
        return orig_cuda(tensor, *args, **kwargs)

    @functools.wraps(orig_backward)
    def autograd_backward(*args, **kwargs):
        if get_ident() != hooks._owner_thread:
            return orig_backward(*args, **kwargs)
        data = hooks.data
        data.seen["backward_calls"] += 1
        if hooks.backward_depth:  # a backward inside backward (reentrant checkpointing)
            return orig_backward(*args, **kwargs)
        if len(data.losses) < hooks.options.loss_values:  # fix's numerics check
            data.losses.append(loss_value(args[0] if args else kwargs.get("tensors")))
        hooks.backward_starting()
        hooks.backward_depth += 1
        try:
            result = hooks.time_part("backward", orig_backward, *args, **kwargs)
        finally:
            hooks.backward_depth -= 1
        hooks.backward_ended(args[0] if args else kwargs.get("tensors"))
        return result

    @functools.wraps(orig_grad)
    def autograd_grad(*args, **kwargs):  # loops that take gradients with autograd.grad
        if hooks.foreign():
            return orig_grad(*args, **kwargs)
        hooks.data.seen["backward_calls"] += 1
        return hooks.time_part("backward", orig_grad, *args, **kwargs)

    @functools.wraps(orig_optimizer_init)
    def optimizer_init(optimizer, /, *args, **kwargs):
        # An optimizer built and not yet stepped: the loss-delimited fallbacks wait for more
        # evidence (it may step after warm-up iterations or a long accumulation).
        if not hooks.foreign():
            session.boundary.optimizer_built = True
            site = call_site()  # the user's line that built it, past torch.optim's __init__s
            if site is not None:
                session.optimizers.created(optimizer, f"{site.file}:{site.line}")
        return orig_optimizer_init(optimizer, *args, **kwargs)

    @functools.wraps(orig_process_start)
    def process_start(process, /):
        if not hooks.foreign():
            session.processes.started(process)
        return orig_process_start(process)

    if hooks.whole.active:  # saves and mode switches matter to the whole run's accounts only
        _patch_whole_run(session)
    p.set(torch.optim.Optimizer, "__init__", optimizer_init)
    p.set(_mp_process.BaseProcess, "start", process_start)
    p.set(DataLoader, "__init__", dataloader_init)
    p.set(DataLoader, "__iter__", dataloader_iter)
    p.set(_dl_mod._BaseDataLoaderIter, "__next__", iterator_next)
    p.set(torch.Tensor, "to", tensor_to)
    p.set(torch.Tensor, "cuda", tensor_cuda)
    p.set(torch.autograd, "backward", autograd_backward)
    p.set(torch.autograd, "grad", autograd_grad)


def _patch_whole_run(session: CaptureSession) -> None:
    """``run --whole``: saves (``torch.save``) and train/eval mode switches, for the accounts."""
    hooks, whole = session.hooks, session.hooks.whole
    orig_save = torch.save
    orig_train = torch.nn.Module.train

    @functools.wraps(orig_save)
    def save(*args, **kwargs):
        if hooks.foreign():
            return orig_save(*args, **kwargs)
        whole.save_started()
        started = session.clock_ns()
        try:
            return orig_save(*args, **kwargs)
        finally:
            at, codes = save_functions(sys._getframe(1))
            whole.save_ended(started, session.clock_ns(), at, codes)

    @functools.wraps(orig_train)
    def train(module, /, *args, **kwargs):
        if not hooks.foreign():
            mode = args[0] if args else kwargs.get("mode", True)
            whole.mode_set(bool(mode), session.clock_ns())
        return orig_train(module, *args, **kwargs)

    session.patcher.set(torch, "save", save)
    session.patcher.set(torch.nn.Module, "train", train)


def save_functions(frame: Any) -> tuple[str | None, list[Any]]:
    """Where a save was called (the user's line) and the functions that make the save: the
    user's function that called it, and every function on the way whose name says it saves
    (Lightning's ``_save_checkpoint``, the Hugging Face Trainer's ``_save``), whose own work
    around ``torch.save`` is the checkpoint's too."""
    at, codes = None, []
    while frame is not None:
        code = frame.f_code
        name = code.co_name.lower()
        user = is_user_file(code.co_filename)
        if at is None and user:
            at = f"{code.co_filename}:{frame.f_lineno}"
            if code.co_name != "<module>":
                codes.append(code)
        elif "save" in name or "checkpoint" in name:
            codes.append(code)
        frame = frame.f_back
    return at, codes


def loss_value(tensors: Any) -> float:
    """The value of the (first) tensor ``backward`` is called on, summed in float64."""
    first = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
    return float(first.detach().double().sum()) if torch.is_tensor(first) else float("nan")
