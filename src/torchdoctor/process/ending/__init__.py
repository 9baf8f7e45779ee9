"""How a run ended, decided in one place: each side that sees a run end (the script's own
process, the supervisor of one process, the launcher of a job) hands its evidence here and gets
one :class:`~torchdoctor.record.Ending` (status, exit status of ``torchdoctor run``, cause, words;
its ``precedence`` orders statuses worst first). :func:`settle` sets it on the record before the
verdict is derived; the renderers and a job's combination read it back from the record.

=================  ==========================================  ==========================
evidence           decided by                                  used by
=================  ==========================================  ==========================
:class:`ScriptEnd`  :func:`decide_script`                      ``build.build_record``
:class:`Stop`       :func:`decide_supervised`                  ``supervisor``
:class:`JobEnd`     :func:`decide_job`, :func:`decide_launcher`  ``launch``
=================  ==========================================  ==========================

This package does not import torch.
"""

from __future__ import annotations

from ...record import Ending
from ._exit import EXIT_FOR, exit_for, exit_status, measured_anything
from ._job import JobEnd, decide_job, decide_launcher
from ._memory import (
    OutOfMemory,
    batch_that_fits,
    host_capacity,
    out_of_memory,
    too_large,
)
from ._script import (
    CTRL_C,
    FINISHED,
    PEER_LEFT_NOTE,
    RAISED,
    STOPPED,
    WHOLE_ENDED,
    ScriptEnd,
    decide_script,
    exited,
)
from ._settle import settle
from ._stop import (
    ENDED_EARLY,
    OWN_CAUSES,
    Stop,
    decide_not_started,
    decide_supervised,
    signal_name,
    stop_words,
)

__all__ = [
    "CTRL_C",
    "ENDED_EARLY",
    "EXIT_FOR",
    "FINISHED",
    "OWN_CAUSES",
    "PEER_LEFT_NOTE",
    "RAISED",
    "STOPPED",
    "WHOLE_ENDED",
    "Ending",
    "JobEnd",
    "OutOfMemory",
    "ScriptEnd",
    "Stop",
    "batch_that_fits",
    "host_capacity",
    "decide_job",
    "decide_launcher",
    "decide_not_started",
    "decide_script",
    "decide_supervised",
    "exit_for",
    "exit_status",
    "exited",
    "measured_anything",
    "out_of_memory",
    "too_large",
    "settle",
    "signal_name",
    "stop_words",
]
