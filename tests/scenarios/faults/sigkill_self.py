"""Killed by SIGKILL after 15 steps (``KILL_AT`` steps when set), as the OOM killer would."""

import os
import signal

from _loop import steps

for i in steps():
    if i == int(os.environ.get("KILL_AT", "15")):
        os.kill(os.getpid(), signal.SIGKILL)
