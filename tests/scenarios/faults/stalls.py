"""Trains 12 steps (or ``STALL_AT``), then stalls (a wait that never returns): only the
wall-time bound ends it, and the record says where the script was then."""

import os
import time

from _loop import steps

for i in steps():
    if i == int(os.environ.get("STALL_AT", "11")):
        time.sleep(3600)  # the stall
