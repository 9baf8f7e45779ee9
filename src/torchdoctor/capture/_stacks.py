"""Where the script's training thread is, sampled from a thread of torchdoctor's at a low rate.

``run --whole`` puts the time it cannot see through a hook (a long startup, logging between
steps, a save function's own work) down to the user's function that held it: every
``interval_s`` this thread reads the training thread's stack (``sys._current_frames``: about 6 us
for 40 frames) and adds the time since its previous look to one key of the current *gap* (the
time since the last step ended):

- ``("part", name, place)``: the thread was inside a timed part of the step (forward,
  backward, ...), at ``place``, the innermost frame of the user's code (a stall inside the
  model's ``forward`` is named at its line); ``("part", name)`` where no frame is the user's;
- ``SAVE``: inside a function of the user's that has called ``torch.save`` (its own work, around
  the save, counts as checkpoint time);
- ``(file, line, function, first line)``: otherwise, the innermost frame of the user's code;
- ``ELSEWHERE``: no frame of the user's on the stack (torch's or a library's own work).

The owner of the sampler takes each gap's buffer when a step ends (:meth:`take`) and decides what
it was: the time of a step at the steady pace is not attributed, the excess of a slow one is.
Nothing is kept per sample: a gap holds one number per key, so memory is bounded by the number of
places the script spends time in.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..analysis.whole_run import IMPORTING
from ._frames import is_user_file

#: 100 samples a second: the grain of what is found by sampling is 10 ms, at about 0.06% of a core.
DEFAULT_INTERVAL_S = 0.01
#: Places kept per table; past it, the smallest half is summed as ELSEWHERE.
MAX_PLACES = 4096
SAVE = ("save",)
ELSEWHERE = ("elsewhere",)
#: ``context()`` answers this while a cost is being measured directly (an evaluation pass, a
#: save, an epoch boundary): its samples are not needed.
KNOWN = "known"
#: ... and this inside an epoch boundary, timed exactly too, though a save function called in it
#: is not: its samples are kept as ``(BOUNDARY, place)`` (or SAVE), for the owner to sort out.
BOUNDARY = "in-boundary"
#: ... and this while an evaluation pass is open: a sample after the pass's last call is not the
#: pass's (a save made before ``model.train()``), so samples are kept with their time until the
#: pass closes (:meth:`StackSampler.evaluated`), at most MAX_EVALUATING of them.
EVALUATING = "evaluating"
MAX_EVALUATING = 20_000
#: Samples of the current gap kept with their stacks (for a save function found late): 20 s.
MAX_RECENT = 2_000


class StackSampler:
    """Samples one thread's stack into per-gap buffers (see the module docstring)."""

    def __init__(
        self,
        thread_id: int,
        context: Callable[[], str | None],
        interval_s: float = DEFAULT_INTERVAL_S,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.interval_s = interval_s
        self._tid = thread_id
        self._context = context
        self._clock_ns = clock_ns
        #: Code objects of the functions that make a save (:func:`._hooks.save_functions`).
        self.save_codes: set[Any] = set()
        #: Code objects on the stack during evaluation passes (up to each one's end).
        self.pass_codes: set[Any] = set()
        self._gap: dict[tuple, int] = {}
        self._evaluating: list[tuple[int, tuple, int, tuple]] = []
        #: The current gap's samples with their stacks: [place, ns, code objects].
        self._recent: list[list[Any]] = []
        #: Held while a sample is taken and while the owner reads or moves the buffers: the
        #: owner's thread takes samples too (:meth:`sample`), and swaps the buffers at each step.
        #: Re-entrant: a signal handler of the script's that saves (Lightning's on SIGUSR1) runs
        #: on the training thread between two bytecodes, maybe of a sample.
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_ns = 0
        self.samples = 0

    def start(self) -> None:
        if self._thread is not None:
            return
        self._last_ns = self._clock_ns()
        self._thread = threading.Thread(target=self._loop, name="torchdoctor-stacks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5.0)
            self._thread = None

    def peek(self, key: tuple) -> int:
        """The current gap's ns at ``key``."""
        return self._gap.get(key, 0)

    def evaluated(self, end_ns: int) -> int:
        """An evaluation pass closed, its last call at ``end_ns``; returns where it really ended.

        A sample after that call in a function the pass ran before it (the script's validation
        step, at work on the last batch a prefetching loop fetched early) is still the pass's:
        the pass ends at the last such sample. The samples after go to the current gap."""
        with self._lock:
            return self._evaluated(end_ns)

    def _evaluated(self, end_ns: int) -> int:
        kept, self._evaluating = self._evaluating, []
        during = {_function(key) for t, key, _, _ in kept if t <= end_ns and len(key) == 4}
        for t, _, _, codes in kept:
            if t <= end_ns:
                self.pass_codes.update(codes)
        for t, key, _, _ in kept:
            if t > end_ns and len(key) == 4 and _function(key) in during:
                end_ns = t
        gap = self._gap
        for t, key, elapsed, codes in kept:
            if t > end_ns:
                after = min(elapsed, t - end_ns)
                gap[key] = gap.get(key, 0) + after
                self._remember(key, after, codes)
        return end_ns

    def take(self) -> dict[tuple, int] | None:
        """The current gap's buffer (key → ns), or ``None`` when it is empty; a new gap starts."""
        with self._lock:
            self._recent = []
            gap = self._gap
            if not gap:
                return None
            self._gap = {}
            return gap

    def pop(self, key: tuple) -> int:
        """The current gap's ns at ``key``, taken out of it."""
        with self._lock:
            return self._gap.pop(key, 0)

    def sort_boundary(self) -> int:
        """:func:`drop_boundary_keys` on the current gap."""
        with self._lock:
            return drop_boundary_keys(self._gap)

    def _loop(self) -> None:
        # Not at a lower priority (as torchdoctor's other threads are): a sample holds the GIL,
        # and a nice-19 thread the system takes off its core while holding it stalls the
        # training thread (measured: +282 us per 3.5 ms step niced, +107 us not,
        # benchmarks/observer_effect.py --jobs whole)
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a sample lost is a sample lost, never the run
                continue

    def sample(self, since: int = 0) -> None:
        """One sample: the time since the last one (or since ``since``, if later: time before
        it is timed exactly elsewhere) put down to where the thread is now. Taken by the
        sampler's thread, and by the owner's as a stretch it times exactly begins (a save): a
        sample of the sampler's thread come late (a busy machine, a paused process) would find
        the stretch under way and drop the time before it (a Lightning save's 0.3 s of work
        before its ``torch.save``, lost so)."""
        with self._lock:
            self._sample(since)

    def _sample(self, since: int = 0) -> None:
        now = self._clock_ns()
        elapsed, self._last_ns = now - max(self._last_ns, since), now
        context = self._context()
        if context == KNOWN:
            return
        self.samples += 1
        if context == EVALUATING:  # kept with its time: the pass's end is known at its close
            if len(self._evaluating) < MAX_EVALUATING:
                key, codes = self._where(sys._current_frames().get(self._tid))
                self._evaluating.append((now, key, elapsed, codes))
            return
        if context is not None and context != BOUNDARY:
            place, _ = self._where(sys._current_frames().get(self._tid))
            key: tuple = ("part", context, place) if len(place) == 4 else ("part", context)
        else:
            key, codes = self._where(sys._current_frames().get(self._tid))
            if context == BOUNDARY and key is not SAVE:
                key = (BOUNDARY, key)
            self._remember(key, elapsed, codes)
        gap = self._gap
        gap[key] = gap.get(key, 0) + elapsed

    def _remember(self, key: tuple, elapsed: int, codes: tuple) -> None:
        """A sample of the current gap with its stack, for :meth:`found_saves`."""
        if key is not SAVE and len(self._recent) < MAX_RECENT:
            self._recent.append([key, elapsed, codes])

    def found_saves(self, codes: set[Any]) -> None:
        """New save functions: the current gap's samples taken inside one of them (their work
        before the first ``torch.save`` was sampled as something else) become SAVE."""
        with self._lock:
            self._found_saves(codes)

    def _found_saves(self, codes: set[Any]) -> None:
        gap = self._gap
        for entry in self._recent:
            key, elapsed, stack = entry
            if key is not SAVE and any(code in codes for code in stack):
                left = gap.get(key, 0)
                moved = min(left, elapsed)
                if moved:
                    gap[key] = left - moved
                    if not gap[key]:
                        del gap[key]
                    gap[SAVE] = gap.get(SAVE, 0) + moved
                entry[0] = SAVE

    def _where(self, frame: Any) -> tuple[tuple, tuple]:
        """The place of a stack (see the module's docstring), and the code objects on it."""
        site = None
        saves = self.save_codes
        importing = False
        codes = []
        while frame is not None:
            code = frame.f_code
            if code in saves:
                return SAVE, ()
            codes.append(code)
            if site is None:
                # "<string>": the ``python -c`` that runs the script under torchdoctor
                if code.co_filename != "<string>" and is_user_file(code.co_filename):
                    name = code.co_name + IMPORTING if importing else code.co_name
                    site = (code.co_filename, frame.f_lineno, name, code.co_firstlineno)
                elif code.co_filename.startswith("<frozen importlib"):
                    importing = True
            frame = frame.f_back
        return site or ELSEWHERE, tuple(codes)


def _function(place: tuple) -> tuple:
    """A sampled place's function: file, name, first line."""
    return (place[0], place[2], place[3])


# --- tables of samples (place → ns) ---------------------------------------------------------


def drop_boundary_keys(gap: dict[tuple, int]) -> int:
    """Sort out the samples taken in an epoch boundary, which is timed whole: those in the
    script's own code go to their place (ns returned: not the boundary's), the rest (the
    loader starting, a library's code) are the boundary's."""
    own = 0
    for key in [k for k in gap if k[0] == BOUNDARY]:
        ns = gap.pop(key, 0)
        place = key[1]
        if len(place) == 4:
            gap[place] = gap.get(place, 0) + ns
            own += ns
    return own


def add(table: dict[tuple, int], gap: dict[tuple, int], places_only: bool = False) -> None:
    """Add a stretch's samples into ``table`` (``places_only``: the user's places, keys of 4),
    which keeps its biggest places past MAX_PLACES."""
    for key, ns in gap.items():
        if not places_only or len(key) == 4:
            table[key] = table.get(key, 0) + ns
    if len(table) > MAX_PLACES:
        fold(table)


def fold(table: dict[tuple, Any]) -> None:
    """Keep the biggest places; the rest becomes ELSEWHERE."""
    keep = sorted(table.items(), key=lambda kv: kv[1], reverse=True)[: MAX_PLACES // 2]
    rest = sum(v for _, v in table.items()) - sum(v for _, v in keep)
    table.clear()
    table.update(keep)
    table[ELSEWHERE] = table.get(ELSEWHERE, 0) + rest
