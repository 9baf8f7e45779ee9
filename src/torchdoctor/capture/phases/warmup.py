"""Warmup: steps that are not measured, while caches, allocators and autotuners settle."""

from __future__ import annotations

from ...record import phase_names
from .base import Phase, PhaseSession


class WarmupPhase(Phase):
    """The first ``--warmup`` steps (at least one: it also finds the device and optimizer)."""

    name = phase_names.WARMUP
    probes = True

    def total(self, session: PhaseSession) -> int:
        return session.options.warmup
