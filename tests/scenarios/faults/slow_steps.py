"""Steps slowly (0.2 s each), so a signal can reach torchdoctor in the middle of measuring."""

import time

from _loop import steps

for _ in steps():
    time.sleep(0.2)
