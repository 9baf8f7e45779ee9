"""The levers ``run --try`` pulls, each one undoable (docs/trials.md).

A lever is applied between two steps of the script through a child Patcher, runs for its own
warm-up and measured steps, and is undone before the next one. What each changes:

- ``amp``: ``torch.autocast`` entered in a forward pre-hook of the outermost module and left in
  its forward hook (bf16 where the device has it, else fp16);
- ``channels-last``: the model's 4-D parameters and the forward's 4-D inputs in
  ``channels_last`` (undone by converting back);
- ``compile``: the outermost module's ``forward`` replaced by ``torch.compile(forward)``; a
  compile that fails falls back to the eager forward and marks the trial failed;
- ``foreach``: the primary optimizer's groups set to ``fused=True`` where the optimizer has it
  (``foreach=True`` otherwise, or when the fused step fails);
- ``threads``: ``torch.set_num_threads(k)`` for a few ``k``;
- ``batch-size``: batches from clones of the main DataLoader at 2x, 4x, 8x its batch size.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

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

    def changed(self, setting: str) -> str:
        return self.name

    def code(self, session: Any, setting: str) -> str:
        return ""

    def caveats(self, session: Any) -> list[str]:
        return []


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
    name = "amp"

    def _dtype(self, session: Any) -> torch.dtype:
        device = session.clock.device
        if device is not None and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            return torch.float16
        return torch.bfloat16

    def apply(self, session, patcher, setting) -> None:
        device_type = session.clock.device.type if session.clock.device is not None else "cpu"
        dtype = self._dtype(session)
        contexts: list[Any] = []

        def enter(module, args):
            ctx = torch.autocast(device_type=device_type, dtype=dtype)
            ctx.__enter__()
            contexts.append(ctx)

        def leave(module, args, output):
            if contexts:
                contexts.pop().__exit__(None, None, None)

        for module in session.root_modules():
            patcher.hook(module.register_forward_pre_hook(enter))
            patcher.hook(module.register_forward_hook(leave, always_call=True))
        patcher.on_restore(lambda: [c.__exit__(None, None, None) for c in reversed(contexts)])

    def changed(self, setting: str) -> str:
        return "the outermost forward under torch.autocast"

    def code(self, session, setting) -> str:
        device_type = session.clock.device.type if session.clock.device is not None else "cpu"
        dtype = str(self._dtype(session)).replace("torch.", "")
        return (
            f"with torch.autocast(device_type={device_type!r}, dtype=torch.{dtype}):\n"
            "    loss = loss_fn(model(x), y)"
        )

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
    name = "channels-last"

    def skip_reason(self, session) -> str | None:
        if not any(_has_conv2d(m) for m in session.root_modules()):
            return "no 2-D convolution in the model: channels_last changes nothing"
        return None

    def apply(self, session, patcher, setting) -> None:
        for module in session.root_modules():
            module.to(memory_format=torch.channels_last)
            patcher.on_restore(
                lambda m=module: m.to(memory_format=torch.contiguous_format)  # type: ignore[misc]
            )

            def inputs(mod, args):
                return tuple(
                    a.contiguous(memory_format=torch.channels_last)
                    if isinstance(a, torch.Tensor) and a.dim() == 4
                    else a
                    for a in args
                )

            patcher.hook(module.register_forward_pre_hook(inputs))

    def changed(self, setting: str) -> str:
        return "model and 4-D inputs in torch.channels_last"

    def code(self, session, setting) -> str:
        return (
            "model = model.to(memory_format=torch.channels_last)\n"
            "x = x.to(device, memory_format=torch.channels_last)"
        )


class Compile(Lever):
    name = "compile"
    warmup = 3

    def __init__(self) -> None:
        self.error: str | None = None
        self._call: tuple[Any, Any, Any] | None = None
        self._breaks: list[dict[str, Any]] | None = None

    def skip_reason(self, session) -> str | None:
        if len(session.root_modules()) != 1:
            return "compile is tried on one outermost module; this loop calls several"
        return None

    def apply(self, session, patcher, setting) -> None:
        (module,) = session.root_modules()
        eager = module.forward
        # Compiling turns off torch.distributions' argument checks for the whole process:
        # they are back as they were once the trial is undone.
        dist_cls = torch.distributions.Distribution
        checks = dist_cls._validate_args
        patcher.on_restore(lambda: dist_cls.set_default_validate_args(checks))
        compiled = torch.compile(eager)

        def forward(*args, **kwargs):
            if self._call is None:
                self._call = (module, args, kwargs)  # to explain its graph breaks afterwards
            if self.error is None:
                try:
                    return compiled(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - the trial failed, the run goes on
                    self.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            return eager(*args, **kwargs)

        patcher.set(module, "forward", forward)
        patcher.on_restore(_stop_compile_workers)
        patcher.on_restore(torch._dynamo.reset)
        patcher.on_restore(self._forget)
        self._eager = eager

    def _forget(self) -> None:
        self._call = None

    @property
    def graph_breaks(self) -> list[dict[str, Any]]:
        """Where dynamo broke the graph: the reason and the script's line, from
        ``torch._dynamo.explain`` of one forward (in eval mode, without grad: no buffer moves)."""
        if self._breaks is None:
            self._breaks = []
            if self._call is not None:
                self._breaks = _explain(self._eager, *self._call)
        return self._breaks

    def changed(self, setting: str) -> str:
        return "the outermost module's forward through torch.compile"

    def code(self, session, setting) -> str:
        return "model = torch.compile(model)"

    def caveats(self, session) -> list[str]:
        return [
            "the first steps compile (their time is the warm-up, reported apart); a new input "
            "shape recompiles"
        ]


class Foreach(Lever):
    name = "foreach"

    def skip_reason(self, session) -> str | None:
        if session.optimizers.primary is None:
            return "no optimizer"
        return None

    def _fused(self, optimizer: Any) -> bool:
        return "fused" in optimizer.defaults

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

    def code(self, session, setting) -> str:
        optimizer = session.optimizers.primary
        kind = type(optimizer).__name__ if optimizer is not None else "Optimizer"
        flag = getattr(self, "used", "fused" if self._fused(optimizer) else "foreach")
        return f"optimizer = torch.optim.{kind}(model.parameters(), ..., {flag}=True)"


class Threads(Lever):
    name = "threads"

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
    name = "batch-size"

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


LEVERS: dict[str, type[Lever]] = {
    cls.name: cls for cls in (Amp, ChannelsLast, Compile, Foreach, Threads, BatchSize)
}


def _stop_compile_workers() -> None:
    """End the threads and processes inductor started to compile (a cold cache starts them):
    the trial is over, and nothing of it may be left running."""
    try:
        from torch._inductor.async_compile import AsyncCompile, shutdown_compile_workers
    except ImportError:  # pragma: no cover - another torch's layout: nothing known to stop
        return
    shutdown_compile_workers()
    if AsyncCompile.pool.cache_info().currsize:
        AsyncCompile.pool().shutdown(wait=True)
        AsyncCompile.pool.cache_clear()


def _explain(eager: Callable[..., Any], module: Any, args: Any, kwargs: Any) -> list[dict]:
    from ._frames import is_user_file

    training = module.training
    try:
        module.eval()
        with torch.no_grad():
            out = torch._dynamo.explain(eager)(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the explanation is extra; the trial stands
        return [{"reason": f"could not explain: {type(exc).__name__}: {exc}"[:300]}]
    finally:
        module.train(training)
        torch._dynamo.reset()
    found = []
    for reason in out.break_reasons:
        user = [f for f in reason.user_stack if is_user_file(f.filename)]
        where = user[-1] if user else (reason.user_stack[-1] if reason.user_stack else None)
        found.append(
            {
                "reason": str(reason.reason).splitlines()[0][:200],
                "file": where.filename if where is not None else None,
                "line": where.lineno if where is not None else None,
                "source": (where.line or "").strip() if where is not None else "",
            }
        )
    return found


def _has_conv2d(module: Any) -> bool:
    return any(isinstance(m, torch.nn.Conv2d) for m in module.modules())


def _set_item(patcher: Patcher, mapping: dict, key: str, value: Any) -> None:
    had, before = key in mapping, mapping.get(key)

    def write(v: Any) -> None:
        if v is _ABSENT:
            mapping.pop(key, None)
        else:
            mapping[key] = v

    patcher.set_state(lambda: before if had else _ABSENT, write, value)


_ABSENT: Any = object()
