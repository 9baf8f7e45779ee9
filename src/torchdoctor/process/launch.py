"""``torchdoctor run --nproc-per-node N``: a job launched by PyTorch's own launcher, every rank under
capture, one report (docs/distributed.md).

The launcher is torch.distributed.run (what ``torchrun`` runs), started in a process of its own
with ``--no-python`` and torchdoctor's child entry as each worker's command: rendezvous, the
ranks' environment, the restart policy (none) and tearing down the other ranks when one fails
are all its own. torchrun gives its workers no file descriptor but the standard ones, so each
rank connects to a Unix socket this process listens on (its path is in the environment) and
streams what it measures there, saying first which rank it is.

When the ranks stop together, rank 0 gathers every rank's record over torch.distributed and
sends the job's record as its last word. When a rank fails (raises, exits, is killed), the
launcher ends the others and this process puts the job together from what each rank of this
node streamed, naming the rank that failed first and its traceback.

This module does not import torch.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._errors import TorchdoctorError
from ..options import RunOptions
from ..record import (
    COMPLETE,
    INTERRUPTED,
    KILLED,
    STATUS_PRECEDENCE,
    TIMED_OUT,
    Environment,
    RankEnv,
    RunRecord,
)
from . import stacks
from ._processes import (
    CHILD_CODE,
    Signals,
    Supervised,
    child_spec,
    end_group,
    not_started,
    record_from_stream,
    wait,
)
from .ending import (
    Ending,
    JobEnd,
    decide_job,
    decide_launcher,
    exit_status,
    measured_anything,
    settle,
    signal_name,
)
from .rank_endings import describe, first_cause, rank_ends, stalled, uneven, uneven_finding
from .stream import STREAM_ENV, StreamReader, StreamState

#: Where the launcher writes the exit code of each rank it saw fail (JSON, rank -> code; a
#: negative code is the signal that ended the process).
EXITS_ENV = "TORCHDOCTOR_RANK_EXITS"

#: The launcher's entry: torch.distributed.run's own ``main``. Its log lines (a banner about
#: OMP_NUM_THREADS, a box per failed worker) and the traceback of a worker's failure or of the
#: signal that stopped it are muted: the report names the failing rank and its traceback.
LAUNCH_CODE = (
    "import sys, logging, os, json\n"
    "del sys.path[0]\n"
    "from torch.distributed.run import main\n"
    "from torch.distributed.elastic.multiprocessing.api import SignalException\n"
    "from torch.distributed.elastic.multiprocessing.errors import ChildFailedError\n"
    "for name in list(logging.root.manager.loggerDict):\n"
    "    if name.startswith('torch.distributed'):\n"
    "        logging.getLogger(name).setLevel(logging.CRITICAL)\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "except ChildFailedError as exc:\n"
    "    codes = {str(r): f.exitcode for r, f in exc.failures.items()}\n"
    f"    with open(os.environ['{EXITS_ENV}'], 'w') as out:\n"
    "        json.dump(codes, out)\n"
    "    sys.exit(1)\n"
    "except SignalException as exc:\n"
    "    sys.exit(128 + int(exc.sigval))\n"
)


def launcher_args(options: RunOptions) -> list[str]:
    """torch.distributed.run's arguments for ``options`` (checked by :func:`check_launch`),
    before the worker's command."""
    args = ["--nproc-per-node", str(options.nproc_per_node), "--max-restarts", "0"]
    if options.nnodes:
        args += ["--nnodes", options.nnodes]
    if options.node_rank is not None:
        args += ["--node-rank", str(options.node_rank)]
    if options.rdzv_endpoint:
        args += ["--rdzv-backend", "c10d", "--rdzv-endpoint", options.rdzv_endpoint]
        args += ["--rdzv-id", "torchdoctor"]
    else:
        args.append("--standalone")  # one node: a free port of its own, no clash with others
    return [*args, "--no-python"]


def check_launch(options: RunOptions) -> None:
    """Refuse launch flags that cannot work, before anything starts (the one place they are
    checked).

    Raises:
        TorchdoctorError: a flag that needs another, a bad ``--nnodes``, a nested launch,
            ``--fix`` or ``--try``.
    """
    if not options.nproc_per_node:
        if (options.nnodes, options.node_rank, options.rdzv_endpoint) != (None, None, None):
            raise TorchdoctorError(
                "--nnodes, --node-rank and --rdzv-endpoint launch a job",
                "add --nproc-per-node N (ranks per node)",
            )
        return
    if RankEnv.detect().under_torchrun:
        raise TorchdoctorError(
            "--nproc-per-node inside a rank of a job torchrun already launched",
            "drop --nproc-per-node (`torchrun ... -m torchdoctor run -- train.py` diagnoses the "
            "job torchrun launched), or run torchdoctor outside torchrun",
        )
    if options.fix:
        raise TorchdoctorError(
            "--fix is not available with --nproc-per-node yet",
            "run the diagnosis of the job, then --fix on one rank's script without the launcher",
        )
    if options.trials:
        raise TorchdoctorError(
            "--try is not available with --nproc-per-node yet (the levers are measured in one "
            "process)",
            "run the diagnosis of the job, then --try on one rank's script without the launcher",
        )
    if options.nnodes is None and (options.node_rank is not None or options.rdzv_endpoint):
        raise TorchdoctorError(
            "--node-rank and --rdzv-endpoint belong to a multi-node launch",
            "add --nnodes M, or leave them out for one node",
        )
    nodes = _max_nodes(options.nnodes)
    if options.node_rank is not None and options.node_rank >= nodes:
        raise TorchdoctorError(
            f"--node-rank {options.node_rank} in a job of {options.nnodes or 1} node(s)",
            f"give a node rank from 0 to {nodes - 1}",
        )
    if options.nnodes not in (None, "1") and not options.rdzv_endpoint:
        raise TorchdoctorError(
            f"--nnodes {options.nnodes} needs the rendezvous every node joins",
            "add --rdzv-endpoint HOST:PORT (the same on every node)",
        )


def _max_nodes(nnodes: str | None) -> int:
    """``--nnodes`` as torchrun reads it (``M`` or ``MIN:MAX``, each at least 1): its most."""
    if nnodes is None:
        return 1
    try:
        parts = [int(p) for p in nnodes.split(":")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or min(parts) < 1 or parts[0] > parts[-1]:
        raise TorchdoctorError(
            f"--nnodes {nnodes!r} is not a number of nodes",
            "give M (at least 1) or MIN:MAX, as torchrun takes it",
        )
    return parts[-1]


def run_launched(
    target: Any, options: RunOptions, progress: Callable[[str, int, int], None] | None = None
) -> Supervised:
    """Launch ``target`` as a job of ranks under capture, within the bound; one record back.

    The caller (``run_supervised``) has checked the options with :func:`check_launch`.
    """
    head = launcher_args(options)
    with Signals() as signals, tempfile.TemporaryDirectory(prefix="torchdoctor-") as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(child_spec(target, options)), encoding="utf-8")
        if signals.received:
            return not_started(target, options, signals.received[0])
        streams = _RankStreams(str(Path(tmp) / "stream.sock"), progress)
        worker = [sys.executable, "-c", CHILD_CODE, str(spec_path), "-"]
        exits_path = Path(tmp) / "exits.json"
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", LAUNCH_CODE, *head, *worker],
                env={**os.environ, STREAM_ENV: streams.path, EXITS_ENV: str(exits_path)},
                start_new_session=True,
            )
        except OSError:
            streams.close()
            raise
        asked: list[float] = []  # when the ranks were asked where they were (the stop)

        def ask_where() -> None:
            asked.append(time.monotonic())
            stacks.dump([s.hello.pid for s in streams.states() if s.step_log])

        timed_out = wait(proc, options.max_seconds, signals, before_stop=ask_where)
        end_group(proc.pid)
        streams.close()
        exitcodes = _exit_codes(exits_path)
        where = {}
        for state in streams.states() if asked else []:
            found = stacks.read(tmp, state.hello.pid)
            if found is not None and found.where:
                where[state.hello.rank] = found
    signalled = signals.received[0] if signals.received else None
    outcome = job_outcome(
        streams.states(), proc.returncode, target, options, timed_out, signalled, exitcodes,
        unanswered_s=signals.unanswered_s,
    )  # fmt: skip
    if asked:
        stalled(outcome.record, streams.states(), where, asked[0])
    return outcome


def _exit_codes(path: Path) -> dict[int, int]:
    """The launcher's exit code of each rank it saw fail (none when no rank failed)."""
    try:
        return {int(k): int(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}
    except (OSError, ValueError, AttributeError):
        return {}


class _RankStreams:
    """A Unix socket the ranks connect to; one stream reader per rank."""

    def __init__(self, path: str, progress: Callable[[str, int, int], None] | None) -> None:
        self.path = path
        self._progress = progress
        self._readers: list[StreamReader] = []
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(path)
        self._server.listen(64)
        self._thread = threading.Thread(target=self._accept, name="torchdoctor-ranks", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            holder: list[StreamReader] = []
            reader = StreamReader(conn.detach(), lambda *a, h=holder: self._shown(h, *a))
            holder.append(reader)
            self._readers.append(reader)

    def _shown(
        self, holder: list[StreamReader], phase: str, done: int, total: int, *detail: str
    ) -> None:
        """Progress of rank 0 only (the others' runs alongside); a node without it shows none.
        ``detail``: ``run --whole``'s live figures."""
        hello = holder[0].state.hello if holder else None
        if self._progress is not None and hello is not None and hello.rank == 0:
            self._progress(phase, done, total, *detail)

    def close(self) -> None:
        """Stop listening, end what is left of every rank, and read their streams to the end."""
        self._server.close()
        self._thread.join(timeout=2.0)
        for reader in list(self._readers):
            hello = reader.state.hello
            if hello is not None:
                end_group(hello.pid)  # a rank is its own session (torchrun's Popen)
        for reader in list(self._readers):
            reader.join(timeout_s=10.0)

    def states(self) -> list[StreamState]:
        return [r.state for r in self._readers if r.state.hello is not None]


def job_outcome(
    states: list[StreamState],
    returncode: int | None,
    target: Any,
    options: RunOptions,
    timed_out: bool,
    signalled: int | None,
    exitcodes: dict[int, int] | None = None,
    unanswered_s: float | None = None,
) -> Supervised:
    """The job's record: rank 0's gathered one, or one put together from this node's ranks
    (how each ended: :mod:`.rank_endings`). ``unanswered_s``: the Ctrl-C handed on had not ended
    the job this many seconds later, and torchdoctor stopped it."""
    from ..analysis.distributed import combine

    for state in states:
        error = state.error
        if error is not None and not error.internal:
            raise TorchdoctorError(error.message, error.hint)
    command = ["--nproc-per-node", str(options.nproc_per_node), *target.describe()]
    if not states:
        return _launcher_failed(command, options, returncode, timed_out, signalled)
    reports = any(s.hello is not None and s.hello.rank == 0 for s in states)
    for state in states:
        final = state.final
        if final is not None and final.record.get("distributed") is not None:
            record = RunRecord.from_dict(final.record)
            record.command = command
            return Supervised(record, final.exit_status, reports=True)
    world = max(s.hello.world_size for s in states if s.hello is not None)
    # torchdoctor itself ended the job (its bound, a signal): no rank failed.
    stopped = TIMED_OUT if timed_out else INTERRUPTED if signalled is not None else None
    ends = rank_ends(states, exitcodes or {}, stopped)
    cause = first_cause(ends)
    short = uneven(ends)
    how = describe(ends, _stopped_words(options, timed_out, signalled, unanswered_s))
    records = [_rank_record(s, command, options, world, stopped) for s in states if s.hello]
    errors = {e.rank: e.error for e in ends if e.ending == "raised" and e.error}
    evidence = JobEnd(
        timed_out=timed_out,
        signalled=signalled,
        max_seconds=options.max_seconds,
        cause_status=cause.status if cause is not None else None,  # type: ignore[arg-type]
        cause_words=f"rank {cause.rank} {how[cause.rank]}" if cause is not None else "",
        follower_without_cause=any(e.ending == "follower" for e in ends),
        uneven=bool(short),
        ranks_status=min(
            (r.status for r in records), key=STATUS_PRECEDENCE.index, default=COMPLETE
        ),
    )

    def decide(job: RunRecord) -> Ending:  # the job's status, set before its verdict
        return decide_job(evidence, measured_anything(job))  # run --whole: steps taken

    job = combine(records, world_size=world, ended=how, errors=errors, ending=decide)
    job.command = command
    ending = job.ending
    assert ending is not None
    if short:
        job.findings.insert(0, uneven_finding(short, ends, job))
        job.notes.insert(0, job.findings[0].title)
        ending = replace(ending, words=job.findings[0].title.split(";")[0])
    settle(job, ending, derive=False, first=True)  # the verdict was derived with the status
    lead = evidence.cause_words
    if short and not lead:
        lead = (
            f"uneven inputs: rank {min(short, key=lambda e: e.steps).rank} ran out of batches first"
        )
    if lead and job.verdict is not None:  # the failure leads; the steps before it follow
        job.verdict.why = f"{lead}; {job.verdict.why}"
    return Supervised(job, ending.exit_status, reports=reports)


def _stopped_words(
    options: RunOptions, timed_out: bool, signalled: int | None, unanswered_s: float | None = None
) -> str:
    if timed_out:
        return f"at the --max-seconds bound ({options.max_seconds:g} s)"
    if signalled is not None and unanswered_s is not None:
        return f"after {signal_name(signalled)} went unanswered for {unanswered_s:g} s"
    return f"on {signal_name(signalled)}" if signalled is not None else ""


def _rank_record(
    state: StreamState, command: list[str], options: RunOptions, world: int, stopped: str | None
) -> RunRecord:
    """One rank's record (``stopped``: torchdoctor ended the job)."""
    hello = state.hello
    if state.final is not None:
        record = RunRecord.from_dict(state.final.record)
    else:
        record = record_from_stream(state, command, options)
        status = stopped or KILLED
        cause = "process-died" if stopped is None else "bound" if stopped == TIMED_OUT else "signal"
        # combine derives each rank's verdict again
        settle(record, Ending(status, exit_status(status, True), cause), derive=False)  # type: ignore[arg-type]
    if record.env is None:
        record.env = Environment(
            torch_version="",
            python_version="",
            platform="",
            device="",
            device_name="",
            clock="",
            torch_threads=0,
            cpu_logical=0,
            cpu_physical=None,
            world_size=world,
            rank=hello.rank if hello is not None else 0,
            local_rank=hello.local_rank if hello is not None else 0,
        )
    return record


def _launcher_failed(
    command: list[str],
    options: RunOptions,
    returncode: int | None,
    timed_out: bool,
    signalled: int | None,
) -> Supervised:
    record = RunRecord(command=command, warmup_steps=options.warmup)
    record.requested_steps = options.steps
    ending = decide_launcher(timed_out, signalled, returncode, options.max_seconds)
    settle(record, ending)
    return Supervised(record, ending.exit_status, reports=True)
