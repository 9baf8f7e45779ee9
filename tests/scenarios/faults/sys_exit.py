"""Leaves through sys.exit(3) after 4 steps, before torchdoctor has measured."""

import sys

from _loop import steps

for i in steps():
    if i == 4:
        sys.exit(3)
