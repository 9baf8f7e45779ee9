"""Killed by SIGKILL after 15 steps, as the OOM killer would."""

import os
import signal

from _loop import steps

for i in steps():
    if i == 15:
        os.kill(os.getpid(), signal.SIGKILL)
