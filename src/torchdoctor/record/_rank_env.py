"""This process's place in a job torchrun launched, read once from its environment into a value.

torchrun tells each rank where it stands through environment variables; the child's greeting,
the capture's rank coordination, the CPU sampler, the record's environment, the job's gathering
and the parent's reporting all need it. Each used to parse the variables itself, with its own
default and its own handling of a malformed value; :meth:`RankEnv.from_environ` is now the one
reader, and a test builds the value it needs (``RankEnv(rank=1, world_size=2)``) without
touching ``os.environ``. Torch-free, so the torchdoctor process reads it too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

#: The variables torchrun sets in each rank it starts, named once.
RANK_KEY = "RANK"
LOCAL_RANK_KEY = "LOCAL_RANK"
WORLD_SIZE_KEY = "WORLD_SIZE"
#: The job's nodes (torchrun's agents).
NODES_KEY = "GROUP_WORLD_SIZE"
#: Set by torchrun's agent in every process it starts, a job of one rank included.
RUN_ID_KEY = "TORCHELASTIC_RUN_ID"


@dataclass(frozen=True)
class RankEnv:
    """Where this process stands in a launched job; the defaults are a lone process's."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    #: Nodes of the job.
    nnodes: int = 1
    #: Started by torchrun (its variables are set), even as the only rank of a job: its sibling
    #: processes are then the same job, and a second launch inside it is refused.
    under_torchrun: bool = False

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> RankEnv:
        """The value ``environ`` describes. A missing or malformed number takes the lone
        process's default: a stray ``RANK=`` in a user's shell must not stop the run."""
        return cls(
            rank=_int(environ, RANK_KEY, 0),
            local_rank=_int(environ, LOCAL_RANK_KEY, 0),
            world_size=_int(environ, WORLD_SIZE_KEY, 1),
            nnodes=_int(environ, NODES_KEY, 1),
            under_torchrun=bool(environ.get(RUN_ID_KEY)) or LOCAL_RANK_KEY in environ,
        )

    @classmethod
    def detect(cls) -> RankEnv:
        """This process's value, from ``os.environ``."""
        return cls.from_environ(os.environ)

    @property
    def launched(self) -> bool:
        """One rank of several: the ranks coordinate and rank 0 reports the job."""
        return self.world_size > 1


def _int(environ: Mapping[str, str], key: str, default: int) -> int:
    try:
        return int(environ.get(key) or default)
    except ValueError:
        return default
