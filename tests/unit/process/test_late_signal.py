"""A SIGTERM or Ctrl-C that comes as the script ends is not lost: the whole record is kept, and
the exit status says the user asked to stop (``fix`` then runs no further variant)."""

from __future__ import annotations

import signal

from torchdoctor._errors import EXIT_INTERRUPTED, EXIT_OK
from torchdoctor.options import RunOptions
from torchdoctor.process import Target
from torchdoctor.process.stream import Final, StreamState
from torchdoctor.process.supervisor import _outcome
from torchdoctor.record import RunRecord


def _finished() -> StreamState:
    state = StreamState()
    state.final = Final(RunRecord(status="complete").to_dict(), EXIT_OK)
    return state


def test_a_signal_after_the_script_ended_keeps_the_record_and_says_interrupted():
    target, options = Target(script="train.py"), RunOptions()
    late = _outcome(_finished(), 0, target, options, False, signal.SIGTERM, late=True)
    assert late.exit_status == EXIT_INTERRUPTED and late.record.status == "complete"
    assert "SIGTERM (signal 15) arrived as the script ended" in late.record.notes[-1]
    # handed on while the script ran, or none at all: the script's own ending stands
    for signalled, was_late in ((signal.SIGINT, False), (None, False)):
        plain = _outcome(_finished(), 0, target, options, False, signalled, late=was_late)
        assert plain.exit_status == EXIT_OK and not plain.record.notes
