"""Forks a helper that would live for two minutes, then hangs without stepping: the bound must
stop the script and its helper, and in time."""

import os
import time

pidfile = os.environ.get("TORCHDOCTOR_TEST_PIDFILE")
child = os.fork()
if child == 0:
    time.sleep(120)
    os._exit(0)
if pidfile:
    with open(pidfile, "w") as fh:
        fh.write(str(child))  # the helper: it must be gone too
while True:
    time.sleep(0.1)
