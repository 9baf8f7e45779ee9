"""Leaves through os._exit(0) after 12 steps: no exception, no atexit, no last word."""

import os

from _loop import steps

for i in steps():
    if i == 12:
        os._exit(0)
