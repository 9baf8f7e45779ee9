"""The levers ``run --try`` pulls, each one undoable (docs/trials.md).

A lever is applied between two steps of the script through a child Patcher, runs for its own
warm-up and measured steps, and is undone before the next one. What each changes:

- ``amp``: ``torch.autocast`` entered in a forward pre-hook of the outermost module and left in
  its forward hook (bf16 where the device has it, else fp16);
- ``channels-last``: the model's 4-D parameters and the forward's 4-D inputs in
  ``channels_last`` (undone by converting back);
- ``compile`` (:mod:`._compile_lever`): the model's ``forward`` replaced by
  ``torch.compile(forward)``; a compile that fails falls back to the eager forward and marks the
  trial failed;
- ``foreach``: the primary optimizer's groups set to ``fused=True`` where the optimizer has it
  (``foreach=True`` otherwise, or when the fused step fails);
- ``threads``: ``torch.set_num_threads(k)`` for a few ``k``;
- ``batch-size``: batches from clones of the main DataLoader at 2x, 4x, 8x its batch size.
"""

from __future__ import annotations

import io
import os
import tokenize
from collections.abc import Callable
from typing import Any

import torch

from .._batches import map_tensors
from .._devices import bf16_supported
from ..record import lever_names
from ._autocast_guard import guarded
from ._frames import statement_at
from ._patch import Patcher

#: Batch size multipliers tried, in order, until samples/s stop growing.
BATCH_FACTORS = (2, 4, 8)
#: A larger batch must give this much more samples/s to try the next.
PLATEAU_GAIN = 1.05


class Lever:
    """One trial: which settings it tries, whether it applies here, how to apply it."""

    name = ""
    warmup = 2

    def skip_reason(self, session: Any) -> str | None:
        return None

    def settings(self, session: Any) -> list[str]:
        return [""]

    def apply(self, session: Any, patcher: Patcher, setting: str) -> None:
        raise NotImplementedError

    def step_ended(self, session: Any, index: int) -> None:
        """The lever's ``index``-th step (1 = its first warm-up step) has ended."""

    def changed(self, setting: str) -> str:
        return self.name

    def code(self, session: Any, setting: str) -> str:
        return ""

    def caveats(self, session: Any) -> list[str]:
        return []

    def detail(self, session: Any) -> dict[str, Any]:
        """What ``torchdoctor fix`` needs to write the lever into the code (where, which flag)."""
        return {}


class Baseline(Lever):
    """Nothing changed: the script as it runs, measured just before and after the levers, so
    each lever is compared with steps taken under the same conditions (the measured steps ran
    beside the system sampler, earlier in the run)."""

    name = "baseline"

    def apply(self, session: Any, patcher: Patcher, setting: str) -> None:
        pass

    def changed(self, setting: str) -> str:
        return "nothing (the script as it runs)"


class Amp(Lever):
    name = lever_names.AMP

    def skip_reason(self, session: Any) -> str | None:
        dtype = session.state.autocast_dtype
        if dtype is None:
            return None
        text = f"already in use: the model's forward runs under torch.autocast(dtype=torch.{dtype})"
        if dtype == "float16" and self._dtype(session) == torch.bfloat16:
            text += (
                "; this device has bf16, which needs no GradScaler: switch dtype=torch.float16 "
                "to torch.bfloat16 in your autocast"
            )
        return text

    def _dtype(self, session: Any) -> torch.dtype:
        return torch.bfloat16 if bf16_supported(session.clock.device) else torch.float16

    def apply(self, session, patcher, setting) -> None:
        device_type = session.clock.device.type if session.clock.device is not None else "cpu"
        dtype = self._dtype(session)
        contexts: list[Any] = []
        live = [True]

        def enter(module, args):
            # Undone while this module's pre-hooks run (the step ended in a hook before this
            # one: torch calls the hooks it listed before), it must not enter autocast: no
            # forward hook of the trial would leave it, and the script would run on under it.
            if not live[0]:
                return
            ctx = torch.autocast(device_type=device_type, dtype=dtype)
            ctx.__enter__()
            contexts.append(ctx)

        def leave(module, args, output):
            if contexts:
                contexts.pop().__exit__(None, None, None)
            # The autocast region ends at the model's output, in the float32 of its weights:
            # what runs after it outside autocast (a GAN's second model once the trial ends
            # mid-iteration, at the first optimizer's step) gets the dtype it expects.
            # Only a tensor or a plain tuple/list: another structure (a ModelOutput) keeps
            # its type untouched.
            if _float32(module) and (
                isinstance(output, torch.Tensor) or type(output) in (tuple, list)
            ):
                return map_tensors(output, _to_float32)
            return None

        for module in session.root_modules():
            patcher.hook(module.register_forward_pre_hook(enter))
            patcher.hook(module.register_forward_hook(leave, always_call=True))
            patcher.set(module, "forward", guarded(module.forward, device_type, live, self._fail))
        patcher.on_restore(lambda: [c.__exit__(None, None, None) for c in reversed(contexts)])
        patcher.on_restore(lambda: live.clear() or live.append(False))

    def _fail(self, error: str) -> None:
        self.error = error

    def changed(self, setting: str) -> str:
        return "the outermost forward under torch.autocast"

    def code(self, session, setting) -> str:
        device_type = session.clock.device.type if session.clock.device is not None else "cpu"
        dtype = str(self._dtype(session)).replace("torch.", "")
        return (
            f"with torch.autocast(device_type={device_type!r}, dtype=torch.{dtype}):\n"
            f"    {_model_line(session)}"
        )

    def detail(self, session) -> dict[str, Any]:
        device = session.clock.device
        return {
            **model_detail(session),
            "device_type": device.type if device is not None else "cpu",
            "dtype": str(self._dtype(session)).replace("torch.", ""),
        }

    def caveats(self, session) -> list[str]:
        if self._dtype(session) == torch.float16:
            return [
                "fp16 (this device has no bf16): add torch.amp.GradScaler to keep small "
                "gradients from underflowing"
            ]
        return [
            "bf16 computes matmuls and convolutions in 8-bit mantissas: check the loss curve; "
            "no GradScaler is needed"
        ]


class ChannelsLast(Lever):
    name = lever_names.CHANNELS_LAST

    def skip_reason(self, session) -> str | None:
        convs = [c for m in session.root_modules() for c in m.modules() if _is_conv2d(c)]
        if not convs:
            return "no 2-D convolution in the model: channels_last changes nothing"
        if all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs):
            return "already in use: the model's convolutions are in torch.channels_last"
        return None

    def apply(self, session, patcher, setting) -> None:
        #: The positions of the forward's 4-D inputs, as seen (for ``torchdoctor fix``).
        self.inputs: set[int] = set()
        for module in session.root_modules():
            module.to(memory_format=torch.channels_last)
            patcher.on_restore(
                lambda m=module: m.to(memory_format=torch.contiguous_format)  # type: ignore[misc]
            )

            def inputs(mod, args):
                four = [isinstance(a, torch.Tensor) and a.dim() == 4 for a in args]
                self.inputs.update(i for i, yes in enumerate(four) if yes)
                return tuple(
                    a.contiguous(memory_format=torch.channels_last) if yes else a
                    for a, yes in zip(args, four)
                )

            patcher.hook(module.register_forward_pre_hook(inputs))

    def changed(self, setting: str) -> str:
        return "model and 4-D inputs in torch.channels_last"

    def detail(self, session) -> dict[str, Any]:
        return {**model_detail(session), "inputs": sorted(getattr(self, "inputs", ()))}

    def code(self, session, setting) -> str:
        model = session.state.model_name()
        return (
            f"{model} = {model}.to(memory_format=torch.channels_last)\n"
            "x = x.to(device, memory_format=torch.channels_last)  # the model's 4-D input"
        )


class Foreach(Lever):
    name = lever_names.FOREACH

    def skip_reason(self, session) -> str | None:
        optimizer = session.optimizers.primary
        if optimizer is None:
            return (
                "no torch.optim optimizer steps in this loop (fused and foreach steps are "
                "torch.optim's; a custom optimizer or a hand-written update has neither)"
            )
        groups = [optimizer.defaults, *optimizer.param_groups]
        for flag in ("fused", "foreach"):
            if any(group.get(flag) for group in groups):
                return f"already in use: {type(optimizer).__name__}(..., {flag}=True)"
        if not {"fused", "foreach"} & set(optimizer.defaults):
            return f"{type(optimizer).__name__} has neither a fused nor a foreach step"
        return None

    def _fused(self, optimizer: Any) -> bool:
        return optimizer is not None and "fused" in optimizer.defaults

    def apply(self, session, patcher, setting) -> None:
        optimizer = session.optimizers.primary
        flag = "fused" if self._fused(optimizer) else "foreach"
        for group in optimizer.param_groups:
            for key, value in (("fused", flag == "fused"), ("foreach", flag == "foreach")):
                if key in group or key in optimizer.defaults:
                    _set_item(patcher, group, key, value)
        self.used = flag
        if flag == "fused":
            step = optimizer.step

            def guarded(*args, **kwargs):
                try:
                    return step(*args, **kwargs)
                except RuntimeError:
                    for group in optimizer.param_groups:
                        group["fused"], group["foreach"] = False, True  # restored with the rest
                    self.used = "foreach"
                    return step(*args, **kwargs)

            patcher.set(optimizer, "step", guarded)

    def changed(self, setting: str) -> str:
        return "the optimizer's multi-tensor step (fused=True, else foreach=True)"

    def detail(self, session) -> dict[str, Any]:
        optimizer = session.optimizers.primary
        if optimizer is None:
            return {}
        return {
            "optimizer": type(optimizer).__name__,
            "flag": getattr(self, "used", "fused" if self._fused(optimizer) else "foreach"),
            "where": session.optimizers.site_of(optimizer),
        }

    def code(self, session, setting) -> str:
        """The script's own line that built the optimizer, with only the flag added; else a
        sketch that names no parameters (a GAN's discriminator optimizer was once shown over
        the generator's, the model the loop calls most)."""
        optimizer = session.optimizers.primary
        if optimizer is None:
            return ""
        kind = type(optimizer).__name__
        flag = getattr(self, "used", "fused" if self._fused(optimizer) else "foreach")
        own = with_flag(session.optimizers.site_of(optimizer), kind, flag)
        if own is not None:
            return own
        return f"{session.state.optimizer_name()} = torch.optim.{kind}(..., {flag}=True)"


def with_flag(where: str | None, kind: str, flag: str) -> str | None:
    """The statement at ``where`` (``file:line``) with ``flag=True`` as the last argument of the
    call that ends it (``opt = Adam(D.parameters(), 1e-3)`` becomes ``opt = Adam(D.parameters(),
    1e-3, fused=True)``); ``None`` unless the statement ends with one call of the optimizer's
    class ``kind`` (a comment after it is dropped)."""
    file, _, line = (where or "").rpartition(":")
    if not file or not line.isdigit():
        return None
    code = _without_comment(statement_at(file, int(line)))
    if not code.endswith(")"):
        return None
    depth, opener = 0, -1
    for i in range(len(code) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(code[i], 0)
        if depth == 0:
            opener = i
            break
    callee = code[:opener].rpartition("=")[2].strip() if opener > 0 else ""
    if callee.rpartition(".")[2] != kind:
        return None  # not a plain call of the optimizer's class: a wrapper, a factory
    inner = code[opener + 1 : -1].rstrip()
    sep = "" if not inner else " " if inner.endswith(",") else ", "
    return f"{code[: opener + 1]}{inner}{sep}{flag}=True)"


def _without_comment(code: str) -> str:
    """One logical line without its comment (a ``#`` in a string stays)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return code.rstrip()
    comment = next((t for t in tokens if t.type == tokenize.COMMENT), None)
    return (code[: comment.start[1]] if comment is not None else code).rstrip()


class Threads(Lever):
    name = lever_names.THREADS

    def settings(self, session) -> list[str]:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        now = torch.get_num_threads()
        return [str(k) for k in sorted({1, max(cpus // 2, 1), cpus}) if k != now]

    def skip_reason(self, session) -> str | None:
        return None if self.settings(session) else "one core: no other thread count to try"

    def apply(self, session, patcher, setting) -> None:
        patcher.set_state(torch.get_num_threads, torch.set_num_threads, int(setting))

    def changed(self, setting: str) -> str:
        return f"torch.set_num_threads({setting})" if setting else "intra-op threads"

    def code(self, session, setting) -> str:
        return f"torch.set_num_threads({setting})  # at the start of the script"


class BatchSize(Lever):
    name = lever_names.BATCH_SIZE

    def skip_reason(self, session) -> str | None:
        loader = session.loaders.main_loader()
        if loader is None:
            return "no DataLoader feeds the steps"
        if getattr(loader, "batch_size", None) is None:
            return "the DataLoader has a batch sampler or no automatic batching"
        return None

    def settings(self, session) -> list[str]:
        size = session.loaders.main_loader().batch_size
        return [str(size * k) for k in BATCH_FACTORS]

    def apply(self, session, patcher, setting) -> None:
        from ..loader import clone_loader, shutdown_workers

        self.clone = clone_loader(session.loaders.main_loader(), batch_size=int(setting))
        self.iterator = iter(self.clone)
        patcher.on_restore(lambda: shutdown_workers(self.iterator))

    def next_batch(self, orig_next: Callable[[Any], Any]) -> Any:
        """The clone's next batch; a new epoch of it when one ends."""
        try:
            return orig_next(self.iterator)
        except StopIteration:
            self.iterator = iter(self.clone)
            return orig_next(self.iterator)

    def changed(self, setting: str) -> str:
        return f"DataLoader(batch_size={setting})" if setting else "the DataLoader's batch size"

    def code(self, session, setting) -> str:
        return f"DataLoader(..., batch_size={setting})  # and scale the learning rate"

    def caveats(self, session) -> list[str]:
        return [
            "a larger batch changes the optimisation: scale the learning rate (linearly, with a "
            "warm-up) and expect fewer steps per epoch",
        ]


def _float32(module: Any) -> bool:
    param = next(module.parameters(), None)
    return param is not None and param.dtype == torch.float32


def _to_float32(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.float() if tensor.dtype in (torch.bfloat16, torch.float16) else tensor


def _is_conv2d(module: Any) -> bool:
    return isinstance(module, torch.nn.Conv2d)


def trained_roots(session: Any) -> list[Any]:
    """The outermost modules with trainable parameters: the model(s), not a loss module."""
    return [m for m in session.root_modules() if any(p.requires_grad for p in m.parameters())]


def not_one_model(session: Any, lever: str) -> str | None:
    """Why a lever tried on the one model the loss is computed from cannot be (the loop calls
    several, or none), or ``None``."""
    models = trained_roots(session)
    if len(models) == 1:
        return None
    names = ", ".join(type(m).__name__ for m in models) or "none"
    return (
        f"{lever} is tried on the one model the loss is computed from; this loop calls "
        f"{len(models)} modules with trainable parameters ({names})"
    )


def model_detail(session: Any) -> dict[str, Any]:
    """Where the script calls its model and its name for it there (for ``torchdoctor fix``)."""
    site = session.state.model
    if site is None:
        return {}
    return {"model_at": f"{site.file}:{site.line}", "model": site.name or ""}


def _model_line(session: Any) -> str:
    """The script's line that calls its model, with where it is; a placeholder otherwise."""
    site = session.state.model
    if site is None or not site.source:
        return "loss = loss_fn(model(x), y)  # your forward and loss"
    return f"{site.source}  # {os.path.basename(site.file)}:{site.line}"


def _set_item(patcher: Patcher, mapping: dict, key: str, value: Any) -> None:
    had, before = key in mapping, mapping.get(key)

    def write(v: Any) -> None:
        if v is _ABSENT:
            mapping.pop(key, None)
        else:
            mapping[key] = v

    patcher.set_state(lambda: before if had else _ABSENT, write, value)


_ABSENT: Any = object()
