"""Trains 12 steps, then stalls (a wait that never returns): only the wall-time bound ends it,
and the record says where the script was then."""

import time

from _loop import steps

for i in steps():
    if i == 11:
        time.sleep(3600)  # the stall
