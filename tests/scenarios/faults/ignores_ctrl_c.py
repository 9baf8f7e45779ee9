"""Ignores Ctrl-C (SIGINT) and steps slowly (0.2 s each): the stop torchdoctor hands on goes
unanswered, and must not hold the run until its bound."""

import signal
import time

from _loop import steps

signal.signal(signal.SIGINT, signal.SIG_IGN)
for _ in steps():
    time.sleep(0.2)
