"""The ``compile`` lever of ``run --try`` (docs/trials.md): the model's ``forward`` through
``torch.compile``, its graph breaks named at the script's line, a compile that built no graph
called so, and everything inductor started ended when the trial is undone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..record import lever_names
from ._levers import Lever, model_detail, not_one_model, trained_roots


class Compile(Lever):
    name = lever_names.COMPILE
    warmup = 3

    def __init__(self) -> None:
        self.error: str | None = None
        self._call: tuple[Any, Any, Any] | None = None
        self._breaks: list[dict[str, Any]] | None = None
        #: Graphs dynamo built for one forward (``torch._dynamo.explain``), once explained.
        self.graph_count: int | None = None

    def skip_reason(self, session) -> str | None:
        several = not_one_model(session, "compile")
        if several is not None:
            return several
        (model,) = trained_roots(session)
        if _compiled(model):
            return "already in use: the model is compiled (torch.compile)"
        return None

    def apply(self, session, patcher, setting) -> None:
        (module,) = trained_roots(session)
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
                self._breaks, self.graph_count = _explain(self._eager, *self._call)
        if self.graph_count == 0 and self.error is None:
            # Nothing was compiled: the trial measured eager code (RNN modules are not traced).
            self.error = (
                "torch.compile built no graph of this forward (dynamo traced none of it; "
                "recurrent modules such as LSTM are not traced by default): the steps ran eager"
            )
        return self._breaks

    def changed(self, setting: str) -> str:
        return "the outermost module's forward through torch.compile"

    def code(self, session, setting) -> str:
        model = session.state.model_name()
        return f"{model} = torch.compile({model})"

    def detail(self, session) -> dict[str, Any]:
        return model_detail(session)

    def caveats(self, session) -> list[str]:
        return [
            "the first steps compile (their time is the warm-up, reported apart); a new input "
            "shape recompiles"
        ]


def _compiled(module: Any) -> bool:
    """``torch.compile(model)`` (an OptimizedModule) or ``model.compile()``."""
    return type(module).__name__ == "OptimizedModule" or (
        getattr(module, "_compiled_call_impl", None) is not None
    )


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


def _explain(
    eager: Callable[..., Any], module: Any, args: Any, kwargs: Any
) -> tuple[list[dict], int | None]:
    from ._frames import is_user_file

    training = module.training
    try:
        module.eval()
        with torch.no_grad():
            out = torch._dynamo.explain(eager)(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the explanation is extra; the trial stands
        return [{"reason": f"could not explain: {type(exc).__name__}: {exc}"[:300]}], None
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
    return found, int(out.graph_count)
