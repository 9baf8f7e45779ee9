"""A user's script named like the tool: it must run as the script, not as torchdoctor."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _loop import steps  # noqa: E402

for _ in steps():
    pass
