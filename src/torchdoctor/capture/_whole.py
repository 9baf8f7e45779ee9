"""``run --whole``: every second of the run put down to a kind, while the script runs to its end.

The session's hooks tell this accountant what they see, on the script's clock; it never changes
what the script does. The run is cut at each step's end into *gaps* (the time since the previous
step ended); in each gap the costs a hook can time exactly are measured (an evaluation pass, a
save, an epoch boundary) and the rest is the step's *work*. Steps are judged in blocks: a step
whose work is beyond 1.5 times its block's median (and 0.5 ms more) is slow, and its excess over
the median goes to what the stack samples of its gap saw (:mod:`._stacks`): a function of the
user's (between steps), or a part of the step (slow steps). Before the first step ends is
startup; after the last, the tail.

Per step this is a few additions and one list append (the blocks: :mod:`._whole_steps`). Memory
is bounded for a run of days: the step-time series merges its blocks in pairs, and sampled places
are one number each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..record import SampledPlace, WholeEvent, WholeSummary
from ._stacks import BOUNDARY, EVALUATING, KNOWN, SAVE, StackSampler, add
from ._whole_steps import SteadySteps, Tally, process_start_ns

#: Events kept for the timelines (evaluations, saves, boundaries, slow steps); later ones counted.
MAX_EVENTS = 5000


def loader_key(it: Any) -> int:
    """Which DataLoader an iterator is of, as the capture tells loaders apart: by its dataset (a
    script that builds its loader anew each epoch keeps its training loader; a training and an
    evaluation loader over one Dataset object are taken as one)."""
    return id(getattr(it, "_dataset", it))


def built_key(loader: Any) -> int:
    """:func:`loader_key` of a DataLoader's iterators, from the DataLoader itself."""
    return id(getattr(loader, "dataset", loader))


class WholeRunWatch:
    """The accountant of a whole run (see the module docstring). Called from the script's thread."""

    #: Measuring (the stand-in, :class:`NoWholeRun`, is not).
    active = True

    def __init__(
        self,
        clock_ns: Callable[[], int],
        thread_id: int,
        part: Callable[[], str | None],
        interval_s: float,
        start_ns: int | None = None,
    ) -> None:
        self.clock_ns = clock_ns
        self.t0_ns = start_ns if start_ns is not None else process_start_ns(clock_ns)
        self._part = part
        self.sampler = StackSampler(thread_id, self._context, interval_s, clock_ns)
        self.steps = 0
        self.first_step_ns: int | None = None
        self.last_step_ns: int | None = None
        self.train_key: int | None = None
        self._last_key: int | None = None
        #: Every exactly timed cost so far (evaluation, saves, boundaries), and its value at the
        #: last step's end: their difference is the current gap's.
        self.known_ns = 0
        self._known_at_step = 0
        self.evaluation = Tally()
        self.checkpoint = Tally()
        self.boundary = Tally()
        self.epochs = 0
        #: DataLoaders built over each dataset (by loader key).
        self.built: dict[int, int] = {}
        self.eval_with_grad = False
        self.startup_places: dict[tuple, int] = {}
        self.tail_places: dict[tuple, int] = {}
        #: What happened when, for the timelines: [kind, start s, seconds], at most MAX_EVENTS.
        self.events: list[list[Any]] = []
        self.events_dropped = 0
        self.judged = SteadySteps(self.t0_ns, self._event)
        self._eval_open: int | None = None
        #: [key, returned at] of the batch (of a loader other than the training one, drawn with
        #: grad on) that opened the evaluation pass: a rebuilt training loader's first, if a
        #: backward follows.
        self._batch_eval: list[int] | None = None
        self._eval_end = 0
        self._eval_mode_ns: int | None = None
        self._save_depth = 0
        self._save_end = 0
        self._save_sites: dict[str | None, int] = {}
        self._save_in_gap = False
        self._boundary_from: int | None = None
        self._boundary_known = 0
        self._startup_known = 0
        #: When the outermost module call began, with grad on, in training mode.
        self._forward_mode: tuple[int, bool, bool] | None = None
        #: An outermost call with grad on in eval mode, until the next event says what it was.
        self._held_forward: tuple[int, int, bool] | None = None  # start, end, in eval mode
        #: A training step is under way (a loader that fetches ahead runs out during the last
        #: step of an epoch: the boundary starts when that step ends).
        self._stepping = False
        self._boundary_deferred = False
        self.trains_in_eval_mode = False
        #: Inside a DataLoader's ``__iter__`` or ``__next__`` (set by the hooks).
        self.loading = False
        #: SAVE samples of the current gap already drawn as part of a checkpoint event.
        self._save_drawn = 0
        #: The functions on the stack when the first step ended: the loop (a save called from
        #: one of them is not a save function of its own).
        self.loop_codes: set[Any] = set()

    # --- what the hooks tell ----------------------------------------------------------------

    def _context(self) -> str | None:
        """For the sampler: a cost being timed exactly (KNOWN), a part of the step, or None."""
        if self._save_depth:
            return KNOWN
        if self._eval_open is not None:
            return EVALUATING
        if self._boundary_from is not None:
            return KNOWN if self.loading else BOUNDARY  # the loader starting: the boundary's
        return self._part()

    def batch_requested(self, key: int, now: int | None = None) -> None:
        """The loop asks a loader for a batch (``now``: the watch's clock, when not told)."""
        now = self.clock_ns() if now is None else now
        self.loading = True
        self._commit_forward()
        grad = torch.is_grad_enabled()
        if key == self.train_key and grad:
            self.training(now)
        elif self.train_key is not None:  # another loader, or the training data evaluated
            if self._eval_open is None and grad:
                self._batch_eval = [key, now]
            self._eval_activity(now, now)

    def batch_returned(self, key: int, now: int | None = None) -> None:
        now = self.clock_ns() if now is None else now
        self.loading = False
        self._last_key = key
        if key == self.train_key and torch.is_grad_enabled():
            self._close_boundary(now)
        elif self._eval_open is not None:
            self._eval_end = now
            if self._batch_eval is not None and self._batch_eval[0] == key:
                self._batch_eval[1] = now

    def loader_exhausted(self, key: int, now: int | None = None) -> None:
        now = self.clock_ns() if now is None else now
        self.loading = False
        if key == self.train_key and torch.is_grad_enabled():
            self.epochs += 1
            if self._stepping:
                self._boundary_deferred = True
            else:
                self._boundary_start(now)
        elif self._eval_open is not None:
            self._eval_end = now

    def iterator_made(self, key: int, now: int) -> None:
        """A new iterator of the training loader, the old one not run out (Lightning's
        ``limit_train_batches``): a new epoch; not with grad off (a helper reading the training
        data under ``torch.no_grad()`` for a loss to report: an evaluation, its batches too)."""
        new_epoch = key == self.train_key and self.steps and self._boundary_from is None
        if new_epoch and torch.is_grad_enabled():
            self.epochs += 1
            self._boundary_start(now)

    def loader_built(self, key: int) -> None:
        """A DataLoader was built over the dataset ``key``: one built anew every epoch."""
        self.built[key] = self.built.get(key, 0) + 1

    def forward_started(self, training: bool) -> None:
        """An outermost module call starts (the hooks'; ``training``: the module's mode)."""
        self._forward_mode = (self.clock_ns(), torch.is_grad_enabled(), training)

    def forward_ended(self, find: Callable[[], Any]) -> None:
        """The outermost module call started last has returned."""
        mode, self._forward_mode = self._forward_mode, None
        if mode is not None:
            self.forward(mode[0], self.clock_ns(), mode[1], mode[2], find)

    def forward(
        self, start: int, end: int, grad: bool, training: bool, find: Callable[[], Any]
    ) -> None:
        """An outermost module call: evaluation when made without grad, in eval mode, or
        between epochs (no training step runs there: a validation left with autograd on).

        A call with grad on in eval mode is held until the next event: a backward then says it
        was a training step of a model left in eval mode (``model.train()`` forgotten)."""
        self._commit_forward()
        if grad and training and self._boundary_from is None:
            self.training(start)
            self._stepping = True
            return
        self.note_eval_site(find)
        if grad:  # in eval mode, or between epochs: a backward after it says it was training
            self._held_forward = (start, end, not training)
            return
        self._eval_activity(start, end)

    def backward_started(self, now: int | None = None) -> None:
        """A backward: the held call was a training step's (the model trains in eval mode).
        After a batch of another loader than the training one, that loader is the training
        loader, rebuilt (each epoch's Dataset and DataLoader anew): not an evaluation."""
        now = self.clock_ns() if now is None else now
        rebuilt = self._batch_eval
        if rebuilt is not None and rebuilt[0] == self._last_key != self.train_key:
            self.train_key, self._eval_open, self._batch_eval = rebuilt[0], None, None
            self._close_boundary(rebuilt[1])
        if self._held_forward is not None:
            self.trains_in_eval_mode |= self._held_forward[2]
            self._held_forward = None
        self.training(now)
        self._stepping = True

    def _commit_forward(self) -> None:
        held, self._held_forward = self._held_forward, None
        if held is not None:
            self.eval_with_grad = True
            self._eval_activity(held[0], held[1])

    def mode_set(self, training: bool, now: int) -> None:
        """``module.train(mode)`` (``eval()`` calls it): eval mode may open a pass."""
        self._commit_forward()
        if training:
            self._close_eval()
            self._eval_mode_ns = None
        elif self._eval_mode_ns is None and self._eval_open is None:
            self._eval_mode_ns = now

    def training(self, now: int | None = None) -> None:
        """The training loop went on: an evaluation pass, if one was open, is over."""
        self._commit_forward()
        self._close_eval()
        self._eval_mode_ns = None

    def save_started(self) -> None:
        self._commit_forward()
        self._close_eval()
        if not self._save_depth:  # the time until now: the save function's, if it is in one,
            # from the latest end of what was timed exactly (a step, a pass, a save)
            exact = (self.last_step_ns, self._eval_end, self._boundary_from, self._save_end)
            self.sampler.sample(since=max(t or 0 for t in exact))
        self._save_depth += 1

    def save_ended(self, started: int, now: int, site: str | None, codes: list[Any]) -> None:
        self._save_depth -= 1
        if self._save_depth:
            return
        self._save_end = now
        checkpoint = self.checkpoint
        checkpoint.ns += self._known(now - started)
        if not self._save_in_gap:
            checkpoint.count += 1
            self._save_in_gap = True
        sampler = self.sampler
        # Before the first step the loop's own function is not known yet, and a function that
        # ran an evaluation pass (a validate() that saves the best model) is the pass's: neither
        # becomes a save function (each would make its other work a checkpoint's)
        if self.last_step_ns is not None:
            skip = (self.loop_codes, sampler.save_codes, sampler.pass_codes)
            new = {c for c in codes if not any(c in known for known in skip)}
            if new:
                sampler.save_codes.update(new)
                sampler.found_saves(new)  # their work before this first save: sampled as else
        # drawn from where the save function's own work (sampled) began, as far as known
        before = sampler.peek(SAVE) - self._save_drawn
        self._save_drawn += before
        self._event("checkpoint", started - before, now)
        sites = self._save_sites  # the checkpoint's line: where its saves cost the most
        sites[site] = sites.get(site, 0) + now - started + before
        checkpoint.where = max(sites, key=sites.__getitem__)

    def step_ended(self, now: int) -> None:
        self._commit_forward()
        self._close_eval()
        self._stepping = False
        self._save_samples()
        gap = self.sampler.take()
        known = self.known_ns - self._known_at_step
        if self.last_step_ns is None:
            self.first_step_ns = now
            self._startup_known = known  # a sanity check's evaluation before the first step
            self.loop_codes = _stack_codes()
            if gap:
                add(self.startup_places, gap)
        else:
            self.judged.add(now - self.last_step_ns - known, gap, now)
        self.steps += 1
        self.last_step_ns = now
        self._known_at_step = self.known_ns
        self._save_in_gap = False
        if self._boundary_deferred:
            self._boundary_deferred = False
            self._boundary_start(now)
        if self.train_key is None:
            self.train_key = self._last_key

    # --- the accounts -----------------------------------------------------------------------

    def _save_samples(self) -> None:
        """The save function's own work around torch.save, sampled in the current gap."""
        self._save_drawn = 0
        sampled = self._known(self.sampler.pop(SAVE))
        self.checkpoint.ns += sampled
        self.checkpoint.sampled_ns += sampled

    def _known(self, ns: int) -> int:
        """Count ``ns`` (not below 0) as exactly timed; returns it."""
        ns = max(int(ns), 0)
        self.known_ns += ns
        return ns

    def _eval_activity(self, start: int, end: int) -> None:
        if self._eval_open is None:
            mode_at = self._eval_mode_ns
            self._eval_open = min(start, mode_at) if mode_at is not None else start
        self._eval_end = max(self._eval_end, end)

    def _close_boundary(self, now: int) -> None:
        """The next epoch's first batch came at ``now``: an epoch boundary under way ends."""
        if self._boundary_from is None:
            return
        self._save_samples()
        # the script's own work in it (an end-of-epoch report) is its own place's
        own = self.sampler.sort_boundary()
        elapsed = now - self._boundary_from - (self.known_ns - self._boundary_known)
        self.boundary.ns += self._known(elapsed - own)
        self.boundary.count += 1
        self._event("epoch-boundary", self._boundary_from, now)
        self._boundary_from = None

    def _close_eval(self) -> None:
        self._batch_eval = None
        if self._eval_open is None:
            return
        self._eval_end = self.sampler.evaluated(self._eval_end)
        self.evaluation.ns += self._known(self._eval_end - self._eval_open)
        self.evaluation.count += 1
        self._event("evaluation", self._eval_open, self._eval_end)
        self._eval_open = None

    def _boundary_start(self, now: int) -> None:
        if self._boundary_from is None:
            self._boundary_from = now
            self._boundary_known = self.known_ns

    def _event(self, kind: str, start: int, end: int) -> None:
        if len(self.events) >= MAX_EVENTS:
            self.events_dropped += 1
            return
        self.events.append([kind, (start - self.t0_ns) / 1e9, (end - start) / 1e9])

    def status_words(self) -> str:
        """The live status line's figures: the current step and the goodput so far."""
        now = self.clock_ns()
        words = []
        judged = self.judged
        if judged.blocks:
            words.append(f"step {judged.blocks[-1][2]:.1f} ms")
        if self.steps:
            steady = judged.steady_total + judged.pending_ns()
            words.append(f"goodput {steady / (now - self.t0_ns):.0%}")
        return " · ".join(words)

    def summary(self, now: int | None = None, final: bool = True) -> WholeSummary:
        """The accounts as a value (the stream carries it; analysis makes the record's of it).

        ``final``: the run is over: the steps not yet judged in a block are judged, and the gap
        since the last step is the tail. Otherwise nothing changes (a snapshot of a live run):
        those steps count at their own time, and the gap so far is the tail.
        """
        now = self.clock_ns() if now is None else now
        pending = 0
        if final:
            self._close_eval()
            self.judged.judge(now)
            self._save_samples()
            last_gap = self.sampler.take()
            if last_gap:
                places = self.tail_places if self.steps else self.startup_places
                add(places, {k[1] if k[0] == BOUNDARY else k: v for k, v in last_gap.items()})
        else:
            pending = self.judged.pending_ns()
        wall = now - self.t0_ns
        if self.first_step_ns is None:
            startup = wall - self.known_ns
            tail = 0
        else:
            startup = self.first_step_ns - self.t0_ns - self._startup_known
            tail = now - self.last_step_ns - (self.known_ns - self._known_at_step)
        judged = self.judged
        return WholeSummary(
            wall_s=wall / 1e9,
            startup_s=max(startup, 0) / 1e9,
            tail_s=max(tail, 0) / 1e9,
            steps=self.steps,
            steps_s=(judged.steady_total + pending) / 1e9,
            slow_steps=judged.slow_count,
            evaluation=self.evaluation.cost(),
            checkpoint=self.checkpoint.cost(),
            boundary=self.boundary.cost(),
            eval_with_grad=self.eval_with_grad,
            trains_in_eval_mode=self.trains_in_eval_mode,
            epochs=self.epochs,
            loaders_built=self.built.get(self.train_key, 0) if self.train_key is not None else 0,
            excess=judged.excess_places(),
            in_step=judged.in_step(),
            blocks=judged.series(),
            startup_places=_places(self.startup_places),
            tail_places=_places(self.tail_places),
            events=tuple(WholeEvent(kind, start, seconds) for kind, start, seconds in self.events),
            events_dropped=self.events_dropped,
            first_step_s=self._since_start(self.first_step_ns),
            last_step_s=self._since_start(self.last_step_ns),
            sample_interval_s=self.sampler.interval_s,
            started_at_s=self.t0_ns / 1e9,
        )

    def _since_start(self, ns: int | None) -> float | None:
        return None if ns is None else (ns - self.t0_ns) / 1e9

    def note_eval_site(self, find: Callable[[], Any]) -> None:
        """The first evaluation's line (``find``: :func:`._script_state.call_site`)."""
        if self.evaluation.where is None:
            self.evaluation.where = where(find()) or ""


def _places(table: dict[tuple, int]) -> tuple[SampledPlace, ...]:
    return tuple(SampledPlace(key, ns / 1e9) for key, ns in table.items())


def _stack_codes() -> set[Any]:
    import sys

    codes = set()
    frame: Any = sys._getframe(1)
    while frame is not None:
        codes.add(frame.f_code)
        frame = frame.f_back
    return codes


def where(site: Any) -> str | None:
    """``file:line`` of a call site, or ``None``."""
    return f"{site.file}:{site.line}" if site is not None else None
