"""The ``checkpoint`` lever of ``run --try`` (docs/trials.md, docs/memory.md): activation
checkpointing of the model's blocks that hold the most activations, memory saved against time
lost, both measured.

The blocks are the memory split's (:func:`~._memory_split.block_of`: the model's children, into
containers), those with layers of their own. Each gets its ``forward`` replaced by one that runs
it under ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`` while switched on (with
grad enabled): the backward recomputes the block's forward instead of keeping what it saved.
The lever's first warm-up step runs with every block switched off and counted by a
:class:`~._memory_split.MemoryWatch` (what each block saved for backward); the blocks that saved
at least :data:`SHARE` of it are switched on, and the second step is counted the same way (the
checkpointed blocks' inputs count as held: checkpoint saves them to recompute). A third warms
up; the measured steps follow, against the script as it runs next to them (the trials' rule).
Recomputing replays the random state (``preserve_rng_state``): dropout draws the same numbers.
"""

from __future__ import annotations

from typing import Any

import torch

from ..record import lever_names
from ._levers import Lever, not_one_model, trained_roots
from ._memory_split import _INDEXED, OUTSIDE, MemoryWatch, block_of

#: A block is checkpointed when it saved at least this share of the step's activations.
SHARE = 0.05


class Checkpoint(Lever):
    name = lever_names.CHECKPOINT
    #: One step counted as it runs, one counted checkpointed, one to warm up.
    warmup = 3

    def __init__(self) -> None:
        self._blocks: dict[str, torch.nn.Module] = {}
        self._on: set[int] = set()
        self._watch: MemoryWatch | None = None
        self.chosen: list[str] = []
        #: The largest chosen block's activations, rebuilt in the backward one block at a time.
        self.rebuilt = 0
        self.before: Any = None
        self.after: Any = None
        self.error: str | None = None
        self._last_saved: dict[str, int] = {}

    def skip_reason(self, session: Any) -> str | None:
        several = not_one_model(session, "checkpointing")
        if several is not None:
            return several
        if not blocks(trained_roots(session)[0]):
            return (
                "no block of the model has layers of its own to recompute: checkpointing a "
                "single layer keeps its input, as the backward does anyway (a flat Sequential: "
                "torch.utils.checkpoint.checkpoint_sequential splits it into segments)"
            )
        return None

    def apply(self, session: Any, patcher: Any, setting: str) -> None:
        (model,) = trained_roots(session)
        self._blocks = blocks(model)
        for block in self._blocks.values():
            patcher.set(block, "forward", self._wrapped(block, block.forward))
        patcher.on_restore(self._stop_watch)
        self._start_watch(session, model)

    def step_ended(self, session: Any, index: int) -> None:
        """After the first warm-up step: switch on the blocks that saved the most; after the
        second: the memory it held."""
        if index == 1:
            self.before = self._stop_watch(session)
            saved = self._saved_by_block()
            total = self.before.activations if self.before is not None else 0
            self.chosen = [
                label
                for label, nbytes in sorted(saved.items(), key=lambda kv: -kv[1])
                if total and nbytes >= SHARE * total
            ]
            if not self.chosen:
                self.error = (
                    "no block of the model saved a share of the activations worth recomputing "
                    f"(each under {SHARE:.0%}; the rest were saved by the model's own code)"
                )
            self._on = {id(self._blocks[label]) for label in self.chosen}
            # the backward rebuilds one block's activations at a time: the largest, at most
            self.rebuilt = max((saved[label] for label in self.chosen), default=0)
            (model,) = trained_roots(session)
            self._start_watch(session, model)
        elif index == 2:
            self.after = self._stop_watch(session)

    # -- the wrapped forward ------------------------------------------------------------------

    def _wrapped(self, block: torch.nn.Module, forward: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        def run(*args: Any, **kwargs: Any) -> Any:
            if id(block) not in self._on or not torch.is_grad_enabled():
                return forward(*args, **kwargs)
            # what it keeps to recompute the block (its inputs) it saves as autograd saves
            # tensors: the watch counts them
            return checkpoint(forward, *args, use_reentrant=False, **kwargs)

        return run

    # -- counting -----------------------------------------------------------------------------

    def _start_watch(self, session: Any, model: torch.nn.Module) -> None:
        self._watch = MemoryWatch([model], session.clock.device)
        self._watch.start()

    def _stop_watch(self, session: Any = None) -> Any:
        watch, self._watch = self._watch, None
        if watch is None:
            return None
        if session is None:
            watch.close()
            return None
        self._last_saved = dict(watch.saved)
        return watch.stop(session.optimizers.known())

    def _saved_by_block(self) -> dict[str, int]:
        """What each block saved: the memory split's labels within it (its layers', when the
        block is a ``Sequential`` the split went into) summed."""
        out = dict.fromkeys(self._blocks, 0)
        for label, nbytes in self._last_saved.items():
            for block in self._blocks:
                if label != OUTSIDE and (label == block or label.startswith(block + ".")):
                    out[block] += nbytes
        return out

    # -- words --------------------------------------------------------------------------------

    def changed(self, setting: str) -> str:
        shown = ", ".join(self.chosen[:4]) + (", ..." if len(self.chosen) > 4 else "")
        return f"torch.utils.checkpoint on {shown}" if self.chosen else "activation checkpointing"

    def detail(self, session: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"blocks": list(self.chosen)}
        for side, split in (("before", self.before), ("after", self.after)):
            if split is not None:
                out[f"activations_{side}"] = split.activations
                out[f"peak_{side}"] = split.peak
                out["device"] = split.device
        if self.after is not None and self.chosen:
            # held at once in the backward: what stays saved, and a block rebuilt in turn
            out["held_at_most"] = self.after.activations + self.rebuilt
        return out

    def code(self, session: Any, setting: str) -> str:
        if not self.chosen:
            return ""
        model = session.state.model_name()
        root = trained_roots(session)[0]
        return (
            "import functools\n"
            "from torch.utils.checkpoint import checkpoint\n\n"
            "# each block's forward is recomputed in the backward instead of keeping its "
            "activations\n"
            f"for block in {_blocks_expression(model, self.chosen, root)}:\n"
            "    block.forward = functools.partial(checkpoint, block.forward, "
            "use_reentrant=False)"
        )

    def caveats(self, session: Any) -> list[str]:
        out = [
            "the backward runs each checkpointed block's forward again: the step is slower, "
            "the memory it frees buys a larger batch or a larger model",
        ]
        norms = sorted(
            {
                type(m).__name__
                for label in self.chosen
                for m in self._blocks[label].modules()
                if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats
            }
        )
        if norms:
            out.append(
                f"the checkpointed blocks hold {', '.join(norms)}: the recomputation updates "
                "their running statistics a second time each step (the model evaluates with "
                "slightly different statistics); keep those layers outside the checkpointed "
                "blocks, or accept it"
            )
        else:
            out.append(
                "the recomputation replays the random state, so dropout draws the same numbers "
                "and the numerics do not change"
            )
        return out


def blocks(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The model's blocks that have layers of their own, by label: the memory split's blocks,
    except that a block of a single layer inside a ``Sequential`` stands for that
    ``Sequential`` (``features`` for ``features.3``), and that a recurrent layer (an ``LSTM``,
    which saves its gates at every time step) is a block alone."""
    out: dict[str, torch.nn.Module] = {}
    model = getattr(model, "_orig_mod", model)  # a torch.compile'd model: the one it wraps
    for name, module in model.named_modules():
        if not name or next(module.children(), None) is not None:
            continue  # found from its layers: each layer's block
        label, block = block_of(model, name)
        if block is model:
            continue
        if isinstance(block, torch.nn.RNNBase):
            pass  # one layer that saves its gates at every time step: a block of its own
        elif next(block.children(), None) is None:  # one layer: its Sequential, if in one
            label = label.rpartition(".")[0]
            block = model.get_submodule(label) if label else model
            if block is model or not isinstance(block, torch.nn.Sequential):
                continue
        out.setdefault(label, block)
    # a Sequential standing for its single layers holds blocks of its own too (SqueezeNet's
    # features and its Fire modules): the inner ones, never both (checkpoints would nest)
    return {k: v for k, v in out.items() if not any(o.startswith(k + ".") for o in out)}


def _blocks_expression(model: str, chosen: list[str], root: torch.nn.Module) -> str:
    """``model.blocks.layers`` when the blocks are every child of one container, else a tuple
    of each (``(model.encoder, model.head[2])``)."""
    parents = {label.rpartition(".")[0] for label in chosen}
    if hasattr(root, "_orig_mod"):  # a torch.compile'd model: reached through the one it wraps
        model, root = f"{model}._orig_mod", root._orig_mod
    if len(parents) == 1:
        (parent,) = parents
        container = root.get_submodule(parent) if parent else None
        every = container is not None and len(list(container.children())) == len(chosen)
        if every and isinstance(container, _INDEXED):
            return _attribute(model, parent, root)
        if every and isinstance(container, torch.nn.ModuleDict):
            return _attribute(model, parent, root) + ".values()"
    items = ", ".join(_attribute(model, label, root) for label in chosen)
    return f"({items},)" if len(chosen) == 1 else f"({items})"


def _attribute(model: str, label: str, root: torch.nn.Module) -> str:
    """The Python that reaches ``label`` in ``root`` named ``model``: a list's element by its
    index, a ``ModuleDict``'s by its key (a string, even ``'3'``), an attribute (a named
    ``Sequential``'s child too: ``features.denseblock1``) by its name."""
    out, module = model, root
    for part in label.split("."):
        if isinstance(module, _INDEXED) and part.isdigit():
            out += f"[{part}]"
        elif isinstance(module, torch.nn.ModuleDict) or not part.isidentifier():
            out += f"[{part!r}]"
        else:
            out += f".{part}"
        module = getattr(module, part)
    return out
