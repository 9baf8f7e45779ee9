"""Batches the loop builds itself: find the functions that make them, time them as input, replay them.

Many loops have no DataLoader: a ``get_batch()`` slices windows of a token file, stacks them and
moves them to the device. Its time is the run's input cost, but no hook of the capture sees it, so
it would land in "other". When a step draws no DataLoader batch, the session searches: for a few
untimed steps a profile function (``sys.setprofile``, this thread only) notes which of the
script's own functions return tensors, and the outermost module's call says which of those tensors
are the model's input. The functions that made them are *builders*; each is wrapped where the
script looks it up (a module global or a class attribute, through the session's ``Patcher``, so
the wrapper is gone on every ending). The wrapper times the call as ``data_wait``, keeps what it
returned for the model-alone phase, and in that phase returns kept results instead of building
new ones: data made free, as for a DataLoader.

Only the script's own functions qualify, never one that runs inside the model's forward, and only
for the model's first argument: later ones may be state the loop carries over (a recurrent
model's hidden state, detached each step by a function of the script), which is not data. A builder defined inside another function
cannot be reached to wrap; the report says where it is.
"""

from __future__ import annotations

import functools
import gc
import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch.utils.weak import WeakIdKeyDictionary

from .._batches import tensors_in
from ..record import phase_names
from ._cost import costed
from ._frames import is_user_file
from ._loaders import ReplayStore
from .phases.base import Done

if TYPE_CHECKING:
    from ._patch import Patcher
    from ._step_hooks import StepHooks

#: Steps the search for the functions that build the batches may take.
SEARCH_STEPS = 3
#: Phases whose steps are neither timed nor traced: the search runs in them only.
SEARCH_PHASES = (phase_names.WARMUP, phase_names.SYNC_SAMPLE)
#: Tensors looked at in one returned value or one model input.
_MAX_LEAVES = 16


class Builder:
    """One function of the script that builds the model's input, and what it returned."""

    def __init__(self, fn: Callable[..., Any], max_kept: int) -> None:
        self.fn = fn
        code = fn.__code__
        self.where = f"{code.co_filename}:{code.co_firstlineno}"
        self.name = fn.__qualname__
        self.kept = ReplayStore(max_batches=max_kept)
        self.replaying = False
        #: Calls of this builder under way: only the outermost one of a recursive builder counts.
        self.depth = 0

    def describe(self) -> str:
        return f"{self.name} ({self.where})"


class BuiltInputs:
    """The search for builders, and the builders found."""

    def __init__(self, max_kept: int, notes: list[str]) -> None:
        self._max_kept = max_kept
        self._notes = notes
        self.builders: list[Builder] = []
        #: Builders found but not wrappable (nested functions), as ``name (file:line)``.
        self.unreachable: list[str] = []
        self.searched = False
        self._searching = False
        self._steps_left = 0
        self._returned: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._user_code: dict[Any, bool] = {}
        self._in_model: Callable[[], bool] = lambda: False

    @property
    def searching(self) -> bool:
        return self._searching

    # --- the search -------------------------------------------------------------------------

    def step_ended(self, batches: int, phase: str, in_model: Callable[[], bool]) -> None:
        """A step ended: search when it drew no DataLoader batch; give up after a few steps."""
        if self._searching:
            self._steps_left -= 1
            if self._steps_left <= 0:
                self.stop_search()
                self._note_not_found()
        elif batches == 0 and not self.searched and phase in SEARCH_PHASES:
            self._start_search(in_model)

    def phase_starting(self, phase: str) -> None:
        """Never search while steps are timed or traced."""
        if self._searching and phase not in SEARCH_PHASES:
            self.stop_search()
            self._note_not_found()

    def model_called(self, args: tuple[Any, ...], patcher: Patcher, hooks: StepHooks) -> None:
        """The outermost module is called with ``args``: wrap the functions that built them."""
        codes: list[Any] = []
        # The first argument is the data; later ones may be state the loop carries from step to
        # step (a recurrent model's hidden state, detached by a function of the script).
        first = args[:1]
        for tensor in tensors_in(first, attributes=False, depth=3)[:_MAX_LEAVES]:
            for code in self._returned.get(tensor, ()):
                if code not in codes:
                    codes.append(code)
        if not codes:
            return
        self.stop_search()
        self._wrap([fn for fn in map(_function_of, codes) if fn is not None], patcher, hooks)
        if self.builders:
            self._notes.append(
                f"the loop builds its batches itself, in {', '.join(self.described())}: timed "
                "as data wait, and replayed for the model-alone phase"
            )
        for where in self.unreachable:
            self._notes.append(
                f"the loop's batches are built by {where}, a function defined inside another "
                "one: torchdoctor cannot time it apart, its time counts as other"
            )

    def stop_search(self) -> None:
        if self._searching:
            self._searching = False
            if sys.getprofile() == self._on_event:
                sys.setprofile(None)
        self._returned = WeakIdKeyDictionary()

    def _start_search(self, in_model: Callable[[], bool]) -> None:
        self.searched = True
        if sys.getprofile() is not None:
            self._notes.append(
                "the loop builds its batches itself, and another profiler is active in this "
                "thread: torchdoctor did not look for the function that builds them"
            )
            return
        self._in_model = in_model
        self._steps_left = SEARCH_STEPS
        self._searching = True
        sys.setprofile(self._on_event)

    def _note_not_found(self) -> None:
        self._notes.append(NOT_FOUND_NOTE)

    def batches_drawn(self) -> None:
        """The measured steps drew DataLoader batches after all: the note is no longer true."""
        if NOT_FOUND_NOTE in self._notes:
            self._notes.remove(NOT_FOUND_NOTE)

    def _on_event(self, frame: Any, event: str, arg: Any) -> None:
        if event != "return" or arg is None:
            return
        code = frame.f_code
        user = self._user_code.get(code)
        if user is None:
            user = not code.co_name.startswith("<") and is_user_file(code.co_filename)
            self._user_code[code] = user
        if not user or self._in_model():
            return
        for tensor in tensors_in(arg, attributes=False, depth=2)[:_MAX_LEAVES]:
            codes = self._returned.get(tensor)
            if codes is None:
                self._returned[tensor] = [code]
            elif code not in codes:
                codes.append(code)

    # --- the builders -----------------------------------------------------------------------

    def _wrap(
        self, functions: list[Callable[..., Any]], patcher: Patcher, hooks: StepHooks
    ) -> None:
        """Wrap each function where the script looks it up; keep those that cannot be reached."""
        for fn in functions:
            if any(b.fn is fn for b in self.builders):
                continue
            builder = Builder(fn, self._max_kept)
            place = _binding(fn)
            if place is None:
                self.unreachable.append(builder.describe())
                continue

            patcher.set(place[0], place[1], _wrapper(builder, hooks))
            self.builders.append(builder)

    def start_replay(self) -> bool:
        """Replay every builder's kept results; False when one has none kept."""
        if not self.builders or not all(b.kept.start(0) for b in self.builders):
            return False
        for builder in self.builders:
            builder.replaying = True
        return True

    def stop_replay(self) -> None:
        for builder in self.builders:
            builder.replaying = False

    def clear(self) -> None:
        self.stop_search()
        for builder in self.builders:
            builder.kept.clear()

    def described(self) -> list[str]:
        return [b.describe() for b in self.builders]


NOT_FOUND_NOTE = (
    "the loop draws no batch from a DataLoader, and no function of the script returned the "
    "model's input: time spent making batches in the loop counts as other (make them in a "
    "function, e.g. get_batch(), to have it timed as input)"
)


def _wrapper(builder: Builder, hooks: StepHooks) -> Callable[..., Any]:
    @functools.wraps(builder.fn)
    def built_by_the_loop(*args: Any, **kwargs: Any) -> Any:
        return _build(hooks, builder, args, kwargs)

    return built_by_the_loop


def _build(hooks: StepHooks, builder: Builder, args: tuple, kwargs: dict) -> Any:
    """A builder's call: replayed in the model-alone phase, else timed as ``data_wait``."""
    if builder.depth or hooks.foreign():  # a builder that calls itself, or another thread's
        return builder.fn(*args, **kwargs)
    return _build_in_loop(hooks, builder, args, kwargs)


@costed
def _build_in_loop(hooks: StepHooks, builder: Builder, args: tuple, kwargs: dict) -> Any:
    """The loop's own call of a builder: a hook like the DataLoader's ``__next__`` (its cost is
    capture's, the builder's work is the script's; a step may end in it)."""
    hooks.settle()
    hooks.check_done()
    if builder.replaying:
        kept = builder.kept.next()
        if kept is not None:
            return kept
    phase = hooks.phase
    hooks.push("data_wait")
    hooks.building += 1
    builder.depth += 1
    try:
        built = hooks._own(builder.fn, *args, **kwargs)
    finally:
        builder.depth -= 1
        hooks.building -= 1
        hooks.pop("data_wait")
    if not isinstance(phase, Done):
        builder.kept.keep(0, built, measuring=phase.measuring)
    return built


def _function_of(code: Any) -> Callable[..., Any] | None:
    """The function object running ``code`` (the script's own: one per code object)."""
    for ref in gc.get_referrers(code):
        if inspect.isfunction(ref) and ref.__code__ is code:
            return ref
    return None


def _binding(fn: Callable[..., Any]) -> tuple[Any, str] | None:
    """``(owner, name)`` where the script finds ``fn``: its module, or the class it is defined in."""
    parts = fn.__qualname__.split(".")
    if "<locals>" in parts:
        return None
    module = next(
        (m for m in list(sys.modules.values()) if getattr(m, "__dict__", None) is fn.__globals__),
        None,
    )
    if module is None:
        return None
    owner: Any = module
    for part in parts[:-1]:
        owner = vars(owner).get(part) if hasattr(owner, "__dict__") else None
        if not isinstance(owner, type):
            return None
    if vars(owner).get(parts[-1]) is not fn:
        return None
    return owner, parts[-1]
