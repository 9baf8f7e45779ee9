"""Where the script's training thread is, sampled from a thread of torchdoctor's at a low rate.

``run --whole`` puts the time it cannot see through a hook (a long startup, logging between
steps, a save function's own work) down to the user's function that held it: every
``interval_s`` this thread reads the training thread's stack (``sys._current_frames``: about 6 us
for 40 frames) and adds the time since its previous look to one key of the current *gap* (the
time since the last step ended):

- ``("part", name)``: the thread was inside a timed part of the step (forward, backward, ...);
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
from ._sampler import lower_thread_priority

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
        #: Code objects of the user's functions that called ``torch.save``.
        self.save_codes: set[Any] = set()
        self._gap: dict[tuple, int] = {}
        self._user_codes: dict[Any, bool] = {}
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

    @property
    def gap(self) -> dict[tuple, int]:
        """The current gap's buffer, live (the owner moves samples between its keys)."""
        return self._gap

    def take(self) -> dict[tuple, int] | None:
        """The current gap's buffer (key → ns), or ``None`` when it is empty; a new gap starts."""
        gap = self._gap
        if not gap:
            return None
        self._gap = {}
        return gap

    def _loop(self) -> None:
        lower_thread_priority()
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a sample lost is a sample lost, never the run
                continue

    def sample(self) -> None:
        now = self._clock_ns()
        elapsed, self._last_ns = now - self._last_ns, now
        context = self._context()
        if context == KNOWN:
            return
        if context == BOUNDARY:
            key: tuple = self._where(sys._current_frames().get(self._tid))
            if key is not SAVE:
                key = (BOUNDARY, key)
        elif context is not None:
            key = ("part", context)
        else:
            key = self._where(sys._current_frames().get(self._tid))
        gap = self._gap
        gap[key] = gap.get(key, 0) + elapsed
        self.samples += 1

    def _where(self, frame: Any) -> tuple:
        site = None
        saves = self.save_codes
        importing = False
        while frame is not None:
            code = frame.f_code
            if saves and code in saves:
                return SAVE
            if site is None:
                if self._is_user(code):
                    name = code.co_name + IMPORTING if importing else code.co_name
                    site = (code.co_filename, frame.f_lineno, name, code.co_firstlineno)
                    if not saves:
                        break
                elif code.co_filename.startswith("<frozen importlib"):
                    importing = True
            frame = frame.f_back
        return site or ELSEWHERE

    def _is_user(self, code: Any) -> bool:
        known = self._user_codes.get(code)
        if known is None:
            # "<string>": the ``python -c`` that runs the script under torchdoctor
            name = code.co_filename
            known = self._user_codes[code] = name != "<string>" and is_user_file(name)
        return known


# --- tables of samples (place → ns) ---------------------------------------------------------


def drop_boundary_keys(gap: dict[tuple, int]) -> None:
    """Samples taken in an epoch boundary: its time is measured whole (less any save in it)."""
    for key in [k for k in gap if k[0] == BOUNDARY]:
        gap.pop(key, None)


def resort(gap: dict[tuple, int], code: Any) -> None:
    """Move the samples of ``code``'s function in the current gap to SAVE."""
    ident = (code.co_filename, code.co_name, code.co_firstlineno)
    for key in list(gap):
        place = key[1] if key[0] == BOUNDARY else key
        if len(place) == 4 and (place[0], place[2], place[3]) == ident:
            gap[SAVE] = gap.get(SAVE, 0) + gap.pop(key, 0)


def add(table: dict[tuple, int], gap: dict[tuple, int]) -> None:
    for key, ns in gap.items():
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
