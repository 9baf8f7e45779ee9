"""Errors torchdoctor shows to users, and the exit statuses of the command line."""

from __future__ import annotations

#: Exit statuses of ``torchdoctor``; documented in docs/cli.md.
EXIT_OK = 0
EXIT_SCRIPT_ERROR = 1  # the user's script raised before the measurement finished
EXIT_USAGE = 2  # bad arguments or input: a missing script, an unreadable file
EXIT_NO_TRAINING = 3  # the script ran but no training step was seen
EXIT_INTERNAL = 4  # torchdoctor itself failed; the report says what it saw
EXIT_TIMED_OUT = 5  # the run reached --max-seconds; the record keeps what was measured
EXIT_OUT_OF_MEMORY = 6  # the script ran out of memory (device or host); the record says where
EXIT_INTERRUPTED = 130  # Ctrl-C


class TorchdoctorError(Exception):
    """An error with a message for the user and, where there is one, the fix.

    The command line prints ``message`` and ``hint`` and exits with ``exit_status``, never a
    traceback.
    """

    exit_status = EXIT_USAGE

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  fix: {self.hint}"


#: What a collective raises when a peer rank went away (gloo, NCCL): the consequence of another
#: rank's ending, never a rank's own failure.
PEER_LOST_SIGNS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "remote process exited",
    "Broken pipe",
)


def lost_peer(text: str) -> bool:
    """Whether an error's text says a collective lost its peer rank."""
    return any(sign in text for sign in PEER_LOST_SIGNS)
