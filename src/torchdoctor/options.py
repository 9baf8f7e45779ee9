"""What ``torchdoctor run`` (and ``loader``, ``watch()``) is asked to do: one object, one place.

A run option used to pass through seven hands (the parser, a list of flags that take a value,
the handler, the runner's options, their conversion, the capture's options, the ``--fix``
re-run), and a flag missing from the hand-kept list had its value taken for the script path.
Now each option is one field of :class:`RunOptions`; a user-facing field carries its command
line flag in its ``metadata``, :func:`add_flags` builds the parser from the fields and
:func:`from_args` builds the object back, so adding a field adds its flag. The capture session
reads the same (frozen) object, and the ``--fix`` re-run derives its own with
:func:`dataclasses.replace`.

This module does not import torch: the command line builds its parser from it before any
handler runs, and ``torchdoctor --help`` stays fast.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from .record.lever_names import TRIAL_NAMES

__all__ = [
    "DEFAULT_MAX_SECONDS",
    "Flag",
    "LoaderDoctorMode",
    "RunOptions",
    "TRIAL_NAMES",
    "add_flags",
    "flags",
    "from_args",
    "non_negative_int",
    "positive_float",
    "positive_int",
    "trial_list",
]

#: When the loader doctor (worker sweep, transform costs, memory) runs: ``"auto"`` when the
#: measured steps look input-bound (``run``), ``"always"`` (``loader``), or ``"off"``.
LoaderDoctorMode = Literal["auto", "always", "off"]


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number of at least 1."""
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def positive_float(text: str) -> float:
    """An argparse ``type``: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError("must be a number of seconds above 0")
    return value


#: The bound of a run (s) when ``--max-seconds`` is not given; ``run --whole`` has none.
DEFAULT_MAX_SECONDS = 900.0


def trial_list(text: str) -> tuple[str, ...]:
    """An argparse ``type``: ``all`` or a comma list of :data:`TRIAL_NAMES`, in their order."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return TRIAL_NAMES
    unknown = [n for n in names if n not in TRIAL_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown trial {', '.join(unknown) if unknown else repr(text)}: use all or some of "
            + ", ".join(TRIAL_NAMES)
        )
    return tuple(n for n in TRIAL_NAMES if n in names)


def non_negative_int(text: str) -> int:
    """An argparse ``type``: a whole number of at least 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


@dataclass(frozen=True)
class Flag:
    """The command line flag of one :class:`RunOptions` field (kept in the field's metadata).

    Attributes:
        name: the option string, e.g. ``"--steps"``.
        help: the help text; ``%(default)s`` shows the field's default.
        type: converts the flag's text to the field's value (flags that take a value).
        metavar: the value's name in the usage line (argparse derives one when ``None``).
        action: an argparse action; ``"store_true"`` / ``"store_false"`` make a switch that
            takes no value (``store_false`` for a field that defaults to ``True``).
    """

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    action: str = "store"


def _flag(default: Any, flag: Flag) -> Any:
    """A dataclass field with ``default`` whose command line flag is ``flag``."""
    return field(default=default, metadata={"flag": flag})


@dataclass(frozen=True)
class RunOptions:
    """Options of ``torchdoctor run``: what to measure and what to do with the record.

    Frozen, so the capture session, the runner and the ``--fix`` re-run all read the same values;
    derive a changed copy with :func:`dataclasses.replace`. Fields with a ``flag`` in their
    metadata are command line flags (in this order in ``--help``); the others are set by the
    subcommand (``loader_doctor``) or by code (``loader_overrides``, ``stop``).

    Attributes:
        steps: measured steps (one step is one ``optimizer.step()``).
        warmup: steps run before measuring.
        json_path: write the run record as JSON here.
        counterfactuals: run the model-alone and loader-alone phases.
        sync_steps: steps after warmup watched by the host-sync finder (not timed); 0 turns it
            off.
        trace_dir: write and analyse a torch.profiler trace of a few untimed steps here.
        quiet: no progress display, only the report.
        fix: re-run with the advised DataLoader settings injected and measure the speedup.
        max_seconds: the wall-time bound of a supervised run (``torchdoctor run``).
        loader_doctor: when the loader doctor runs (see :data:`LoaderDoctorMode`).
        loader_overrides: DataLoader keyword arguments forced on every loader the script builds
            (the ``--fix`` re-run); held as a read-only mapping.
        threads_override: ``torch.set_num_threads(threads_override)`` at the start of the run,
            held against the script's own calls (the ``--fix`` re-run); ``None``: left alone.
        source_overrides: files of the user's run from patched copies (original path → patched
            file), their own paths kept (``torchdoctor fix``'s measurements).
        loss_values: seed torch, ``random`` and numpy with 0 before the script runs and keep the
            value of the first ``loss_values`` tensors ``backward`` is called on (``torchdoctor
            fix``'s numerics check: the patched script must compute the same losses); 0: off.
        html_path: write the report as a self-contained HTML page here.
        timeline_path: write the steps' parts as a Chrome/Perfetto trace here (by the script's
            process, when the run ends).
        trials: levers ``--try`` measures (:data:`TRIAL_NAMES`), in order.
        flops: count one step's FLOPs and the device utilisation.
        nproc_per_node: launch this many ranks per node through torch.distributed.run.
        nnodes: nodes of a launched job (torchrun's ``--nnodes``).
        node_rank: this node's rank in a launched job.
        rdzv_endpoint: ``HOST:PORT`` of the c10d rendezvous of a multi-node launch.
        whole: run the script to its own end, passively, and account for every second of it
            (``record.whole_run``).
        sample_interval_s: ``whole``: seconds between two samples of the script's stack.
        stop: raise ``StopRun`` into the script once done; ``False`` lets the script carry on
            unobserved (the capture-overhead benchmark).
    """

    steps: int = _flag(
        20, Flag("--steps", "measured steps (default %(default)s)", type=positive_int)
    )
    warmup: int = _flag(
        5, Flag("--warmup", "steps before measuring (default %(default)s)", type=non_negative_int)
    )
    json_path: str | None = _flag(
        None, Flag("--json", "write the run record as JSON to PATH", type=str, metavar="PATH")
    )
    counterfactuals: bool = _flag(
        True,
        Flag(
            "--no-counterfactuals",
            "skip the model-alone and loader-alone phases",
            action="store_false",
        ),
    )
    sync_steps: int = _flag(
        2,
        Flag(
            "--sync-steps",
            "steps after warmup watched for host syncs and copies, not timed "
            "(default %(default)s; 0: off)",
            type=non_negative_int,
        ),
    )
    trace_dir: str | None = _flag(
        None,
        Flag(
            "--trace",
            "also record a torch.profiler trace of 3 untimed steps, after 1 warm-up step, in "
            "DIR (TensorBoard, Perfetto) and analyse it",
            type=str,
            metavar="DIR",
        ),
    )
    quiet: bool = _flag(False, Flag("--quiet", "no progress, only the report", action="store_true"))
    fix: bool = _flag(
        False,
        Flag(
            "--fix",
            "re-run with the advised DataLoader settings (and torch threads) injected and "
            "measure the speedup",
            action="store_true",
        ),
    )
    max_seconds: float | None = _flag(
        DEFAULT_MAX_SECONDS,
        Flag(
            "--max-seconds",
            "wall-time bound of the run, after which the script is stopped and the record keeps "
            "what was measured (default 900; --whole: none; the --fix re-run gets its own)",
            type=positive_float,
            metavar="S",
        ),
    )
    html_path: str | None = _flag(
        None,
        Flag(
            "--html",
            "also write the report as one self-contained HTML page to PATH (docs/report.md)",
            type=str,
            metavar="PATH",
        ),
    )
    timeline_path: str | None = _flag(
        None,
        Flag(
            "--timeline",
            "write the measured, model-alone and no-sync steps' parts as a Chrome/Perfetto "
            "trace JSON to PATH",
            type=str,
            metavar="PATH",
        ),
    )
    trials: tuple[str, ...] = _flag(
        (),
        Flag(
            "--try",
            "measure levers in the script's own loop, each against its measured steps: a comma "
            f"list of {', '.join(TRIAL_NAMES)}, or all (docs/trials.md)",
            type=trial_list,
            metavar="LIST",
        ),
    )
    flops: bool = _flag(
        False,
        Flag(
            "--flops",
            "count one step's FLOPs and the utilisation of the device's peak (implied by --try)",
            action="store_true",
        ),
    )
    nproc_per_node: int | None = _flag(
        None,
        Flag(
            "--nproc-per-node",
            "launch N ranks of the script through torch.distributed.run (torchrun), each under "
            "capture, and report the job as one (docs/distributed.md)",
            type=positive_int,
            metavar="N",
        ),
    )
    nnodes: str | None = _flag(
        None,
        Flag(
            "--nnodes",
            "with --nproc-per-node: nodes in the job (torchrun's --nnodes); run torchdoctor on "
            "each with the same --rdzv-endpoint",
            type=str,
            metavar="M",
        ),
    )
    node_rank: int | None = _flag(
        None,
        Flag("--node-rank", "with --nnodes: this node's rank", type=non_negative_int, metavar="R"),
    )
    rdzv_endpoint: str | None = _flag(
        None,
        Flag(
            "--rdzv-endpoint",
            "with --nnodes: HOST:PORT of the c10d rendezvous every node joins",
            type=str,
            metavar="HOST:PORT",
        ),
    )
    whole: bool = _flag(
        False,
        Flag(
            "--whole",
            "watch the whole run to the script's own end, passively, and account for every "
            "second by kind: startup, steps, slow steps, epoch boundaries, evaluation, "
            "checkpoints, between steps, tail (no bound unless --max-seconds; docs/whole-run.md)",
            action="store_true",
        ),
    )
    loader_doctor: LoaderDoctorMode = "auto"
    loader_overrides: Mapping[str, Any] = field(default_factory=dict)
    threads_override: int | None = None
    source_overrides: Mapping[str, str] = field(default_factory=dict)
    loss_values: int = 0
    stop: bool = True
    #: ``run --whole``: seconds between two samples of the script's stack.
    sample_interval_s: float = 0.01

    def __post_init__(self) -> None:
        # A private read-only copy: the caller's dict can change without changing the run, and
        # no reader of the options can change them for the others.
        for name in _MAPPINGS:
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def measuring_only(self, **changes: Any) -> RunOptions:
        """These options for a run that only measures steps (the ``--fix`` re-run, ``fix``'s
        variants): no counterfactual, loader doctor, sync sampling, trace, trial or FLOP count,
        and no file written; ``changes`` on top."""
        return dataclasses.replace(
            self,
            counterfactuals=False,
            loader_doctor="off",
            sync_steps=0,
            trace_dir=None,
            json_path=None,
            html_path=None,
            timeline_path=None,
            fix=False,
            trials=(),
            flops=False,
            **changes,
        )

    def plain(self) -> dict[str, Any]:
        """Every field as a plain value (the read-only mappings as dicts): what crosses to
        another process (a spawned worker, pickled; the script's process, as JSON)."""
        return {**self.__dict__, **{name: dict(getattr(self, name)) for name in _MAPPINGS}}

    def __getstate__(self) -> dict[str, Any]:
        # A mappingproxy does not pickle.
        return self.plain()

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
        self.__post_init__()


#: The fields of :class:`RunOptions` held as read-only mappings.
_MAPPINGS = ("loader_overrides", "source_overrides")


def flags(cls: type[RunOptions] = RunOptions) -> list[tuple[dataclasses.Field, Flag]]:
    """The fields of ``cls`` that are command line flags, in ``--help`` order."""
    return [(f, f.metadata["flag"]) for f in dataclasses.fields(cls) if "flag" in f.metadata]


def add_flags(parser: argparse.ArgumentParser, cls: type[RunOptions] = RunOptions) -> None:
    """Add one flag per flagged field of ``cls`` (:class:`RunOptions` or a subclass) to ``parser``.

    Each flag stores into the attribute named like its field, with the field's default, so
    :func:`from_args` can read them back without a second list of names.
    """
    for f, flag in flags(cls):
        kwargs: dict[str, Any] = {"dest": f.name, "default": f.default, "help": flag.help}
        if flag.action == "store":
            kwargs.update(type=flag.type, metavar=flag.metavar)
        kwargs["action"] = flag.action
        parser.add_argument(flag.name, **kwargs)


def from_args(
    args: argparse.Namespace, cls: type[RunOptions] = RunOptions, **overrides: Any
) -> RunOptions:
    """The options (a ``cls``) of a parsed command line.

    Every field found on ``args`` is taken, flags and the values a subcommand sets with
    ``set_defaults`` (``loader_doctor``) alike; ``overrides`` win over both.
    """
    values = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)
    }
    values.update(overrides)
    if "max_seconds" in values and values["max_seconds"] is None and not values.get("whole"):
        # a parser that leaves --max-seconds None until known: only a whole run goes unbounded
        values["max_seconds"] = DEFAULT_MAX_SECONDS
    return cls(**values)
