"""``EMA``: an exponential moving average of a model's weights, updated with multi-tensor ops."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

#: Written into ``EMA.state_dict()`` so a load can tell our checkpoints from anything else.
_STATE_FORMAT = "torchdoctor.EMA"
_STATE_VERSION = 1


class EMA:
    """An exponential moving average of a model's weights (parameters and floating buffers).

    ``ema.module`` is the averaged copy: a deep copy of the model taken at construction, in eval
    mode and with ``requires_grad`` off, which you evaluate or save instead of the live model.
    Each :meth:`update` moves it towards the live weights::

        averaged = d * averaged + (1 - d) * live,   d = decay * (1 - exp(-updates / warmup_steps))

    where ``updates`` counts calls to :meth:`update`, this one included. The warm-up keeps ``d``
    small at first, so the average is not dominated by the random initial weights: after 2000
    updates (with the default ``warmup_steps``) ``d`` is 63% of ``decay``, after 10000 it is
    99.3%. ``warmup_steps=0`` uses ``decay`` from the first update.

    Floating-point tensors are averaged with one multi-tensor ``lerp`` per (device, dtype)
    group instead of one small kernel per tensor; other buffers (BatchNorm's
    ``num_batches_tracked``) are copied. The live model may be wrapped in
    ``DistributedDataParallel``, ``DataParallel`` or ``torch.compile``: the wrapper is looked
    through, both here and in :meth:`update`, so the averaged copy is the plain model.

    Args:
        model: the model to average, wrapped or not.
        decay: the decay once warm-up is over, in [0, 1); closer to 1 averages over more steps.
        warmup_steps: the time constant of the warm-up, in updates; 0 turns warm-up off.
        device: keep the averaged copy here (e.g. ``"cpu"`` to spare GPU memory); each update
            then copies the live weights across. None keeps it where the model is.

    Raises:
        ValueError: ``decay`` or ``warmup_steps`` out of range.

    Example:
        >>> ema = EMA(model, decay=0.9999)
        >>> for batch in loader:
        ...     loss = criterion(model(batch.x), batch.y)
        ...     loss.backward()
        ...     optimizer.step()
        ...     optimizer.zero_grad()
        ...     ema.update(model)
        >>> evaluate(ema.module)
        >>> torch.save(ema.state_dict(), "ema.pt")
    """

    def __init__(
        self,
        model: nn.Module,
        decay: float = 0.9999,
        warmup_steps: float = 2000,
        device: torch.device | str | None = None,
    ) -> None:
        _check_settings(decay, warmup_steps)
        self.decay = float(decay)
        self.warmup_steps = warmup_steps
        self.device = None if device is None else torch.device(device)
        self.updates = 0
        self.module = copy.deepcopy(unwrap_model(model))
        if self.device is not None:
            self.module.to(self.device)
        self.module.eval()
        self.module.requires_grad_(False)

    @property
    def effective_decay(self) -> float:
        """The ``d`` of the last update (0.0 before the first): ``decay`` scaled by the warm-up."""
        return self.decay_after(self.updates)

    def decay_after(self, updates: int) -> float:
        """The ``d`` the update number ``updates`` (counting from 1) uses."""
        if updates <= 0:
            return 0.0
        if self.warmup_steps == 0:
            return self.decay
        return self.decay * (1.0 - math.exp(-updates / self.warmup_steps))

    def update(self, model: nn.Module) -> None:
        """Move the averaged copy one step towards ``model``'s current weights.

        Args:
            model: the live model, wrapped or not; the same architecture as at construction.

        Raises:
            ValueError: ``model`` has tensors the averaged copy lacks, lacks some it has, or a
                tensor of another shape.
        """
        averaged = _named_tensors(self.module)
        live = _named_tensors(unwrap_model(model))
        _check_same_structure(averaged, live)
        self.updates += 1
        weight = 1.0 - self.effective_decay  # lerp's weight is the share of the live tensor
        with torch.no_grad():
            to_average: dict[tuple[torch.device, torch.dtype], tuple[list, list]] = {}
            to_copy: dict[tuple[torch.device, torch.dtype], tuple[list, list]] = {}
            for name, target in averaged.items():
                source = live[name]  # no detach needed: nothing is recorded under no_grad
                groups = to_average if _is_averaged(target) else to_copy
                targets, sources = groups.setdefault((target.device, target.dtype), ([], []))
                targets.append(target)
                # lerp needs both sides on one device and in one dtype; copy_ converts itself.
                if groups is to_average and (
                    source.device != target.device or source.dtype != target.dtype
                ):
                    source = source.to(device=target.device, dtype=target.dtype)
                sources.append(source)
            for targets, sources in to_average.values():
                torch._foreach_lerp_(targets, sources, weight)
            for targets, sources in to_copy.values():
                torch._foreach_copy_(targets, sources)

    def state_dict(self) -> dict[str, Any]:
        """The averaged weights, the update count and the settings, for ``torch.save``.

        Only tensors, numbers and strings: ``torch.load(..., weights_only=True)`` reads it.
        """
        return {
            "format": _STATE_FORMAT,
            "version": _STATE_VERSION,
            "decay": self.decay,
            "warmup_steps": self.warmup_steps,
            "updates": self.updates,
            "module": self.module.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved: weights (onto this copy's device), count, settings.

        Raises:
            ValueError: ``state`` is not an ``EMA.state_dict()`` this version can read, or holds
                settings out of range.
            RuntimeError: the saved weights do not fit the averaged copy (from
                ``nn.Module.load_state_dict``).
        """
        if not isinstance(state, Mapping) or state.get("format") != _STATE_FORMAT:
            raise ValueError("not an EMA state dict (expected the result of EMA.state_dict())")
        if state.get("version") != _STATE_VERSION:
            raise ValueError(
                f"EMA state dict version {state.get('version')!r}; this torchdoctor reads "
                f"version {_STATE_VERSION}"
            )
        updates = state["updates"]
        if isinstance(updates, bool) or not isinstance(updates, int) or updates < 0:
            raise ValueError(f"updates must be a non-negative int, got {updates!r}")
        _check_settings(state["decay"], state["warmup_steps"])
        self.module.load_state_dict(state["module"])
        self.decay = float(state["decay"])
        self.warmup_steps = state["warmup_steps"]
        self.updates = updates

    def __repr__(self) -> str:
        device = "" if self.device is None else f", device='{self.device}'"
        return (
            f"EMA({type(self.module).__name__}, decay={self.decay}, "
            f"warmup_steps={self.warmup_steps}{device}, updates={self.updates}, "
            f"effective_decay={self.effective_decay:.6g})"
        )


def unwrap_model(model: nn.Module) -> nn.Module:
    """The module under ``DistributedDataParallel``, ``DataParallel`` and ``torch.compile``."""
    wrappers = (nn.parallel.DistributedDataParallel, nn.DataParallel)
    while True:
        if isinstance(model, wrappers):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):  # torch.compile's wrapper
            model = model._orig_mod
        else:
            return model


def _check_settings(decay: Any, warmup_steps: Any) -> None:
    """Refuse a decay outside [0, 1) or a negative warm-up, saying which and why."""
    if isinstance(decay, bool) or not isinstance(decay, (int, float)):
        raise ValueError(f"decay must be a number in [0, 1), got {decay!r}")
    if not 0.0 <= decay < 1.0:
        raise ValueError(
            f"decay must be in [0, 1), got {decay!r}: 1 would never move the average, "
            "values near 1 (0.999, 0.9999) average over more steps"
        )
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, (int, float)):
        raise ValueError(f"warmup_steps must be a number >= 0, got {warmup_steps!r}")
    if not warmup_steps >= 0 or math.isinf(warmup_steps):  # `not >=` also catches NaN
        raise ValueError(
            f"warmup_steps must be a finite number >= 0 (0 turns warm-up off), got {warmup_steps!r}"
        )


def _named_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters then buffers by name, as ``state_dict`` orders them (shared ones once)."""
    tensors = dict(module.named_parameters())
    tensors.update(module.named_buffers())
    return tensors


def _is_averaged(tensor: torch.Tensor) -> bool:
    return tensor.is_floating_point() or tensor.is_complex()


def _check_same_structure(averaged: dict[str, torch.Tensor], live: dict[str, torch.Tensor]) -> None:
    """Refuse a live model whose tensors are not the averaged copy's, naming the differences."""
    if averaged.keys() != live.keys():
        missing = [name for name in averaged if name not in live]
        unexpected = [name for name in live if name not in averaged]
        raise ValueError(
            "the model passed to EMA.update has a different structure from the averaged copy: "
            + "; ".join(
                part
                for part in (
                    f"missing {_names(missing)}" if missing else "",
                    f"unexpected {_names(unexpected)}" if unexpected else "",
                )
                if part
            )
        )
    for name, target in averaged.items():
        if live[name].shape != target.shape:
            raise ValueError(
                f"the model passed to EMA.update has a different structure from the averaged "
                f"copy: {name} has shape {tuple(live[name].shape)}, the average "
                f"{tuple(target.shape)}"
            )


def _names(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"
