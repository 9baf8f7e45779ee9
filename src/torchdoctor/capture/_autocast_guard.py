"""The amp trial's guard: a forward an op refuses to run in reduced precision runs again without
autocast, so the trial fails and the script's step goes on.

oneDNN's bf16 LSTM on a CPU without AVX-512 raises under autocast; before this guard the trial's
error ended the user's script (a script-error ending). Only that refusal is retried: an
out-of-memory error, the script's own errors and any error once the trial is over are raised
as they came.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

#: An error that names reduced precision or the CPU features its kernels need.
REDUCED = re.compile(r"bf16|bfloat16|half|float16|fp16|dtype|avx", re.IGNORECASE)


def guarded(
    forward: Callable[..., Any], device_type: str, live: list[bool], failed: Callable[[str], None]
) -> Callable[..., Any]:
    """``forward``, run again without autocast when it raises an op's refusal of the reduced
    precision while ``live[0]`` (the trial's autocast is on): ``failed`` is told the error, and
    ``live[0]`` turns off, so no further forward enters autocast."""

    def forward_or_eager(*args: Any, **kwargs: Any) -> Any:
        try:
            return forward(*args, **kwargs)
        except RuntimeError as exc:
            said = str(exc)
            if (
                isinstance(exc, torch.OutOfMemoryError)
                or not live[0]
                or not torch.is_autocast_enabled(device_type)
                or not REDUCED.search(said)
            ):
                raise
            failed(f"{type(exc).__name__}: {said.splitlines()[0][:300]}")
            live[0] = False
        # again outside the except clause: the failed attempt's frames are not kept alive
        with torch.autocast(device_type=device_type, enabled=False):
            return forward(*args, **kwargs)

    return forward_or_eager
