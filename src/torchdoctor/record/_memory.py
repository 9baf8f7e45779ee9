"""What one training step holds in memory, by kind (docs/memory.md). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModuleMemory:
    """A block of the model and the activations its forward saved for backward."""

    #: Its name in the outermost module (``layers.3``), or the module's own class name when it
    #: is the outermost one.
    module: str
    #: Its class (``Block``) and where the class is defined (``model.py:12``), when known.
    type: str
    defined_at: str | None
    nbytes: int


@dataclass
class MemorySplit:
    """One untimed training step's memory by kind, in bytes: what the model, its gradients and
    its optimizer hold, what the forward saved for backward, and on a device with allocator
    statistics the step's peak and what else it held (temporaries)."""

    parameters: int
    gradients: int
    optimizer_state: int
    #: Tensors the forward saved for backward (autograd's saved tensors), each storage once,
    #: parameters left out.
    activations: int
    #: The blocks whose saved activations are largest, largest first (at most 5).
    largest: list[ModuleMemory] = field(default_factory=list)
    #: The device the model's parameters are on.
    device: str = "cpu"
    #: The device allocator's peak during the step and what it held when the step began;
    #: ``None`` on the CPU (no allocator statistics there).
    peak: int | None = None
    at_start: int | None = None
    #: Samples in the step's batch: the leading dimension of the outermost module's first
    #: tensor input; ``None`` when it had none.
    rows: int | None = None
    #: Activations saved before the step's first backward began: those of the batch of
    #: ``rows`` samples (a step accumulating gradients over micro-batches saves more in all but
    #: holds one micro-batch's at a time); ``None`` when no backward read a saved tensor.
    first_pass: int | None = None

    @property
    def held(self) -> int:
        """Parameters, gradients, optimizer state and activations together."""
        return self.parameters + self.gradients + self.optimizer_state + self.activations

    @property
    def temporaries(self) -> int | None:
        """The peak beyond what is held by kind: the step's temporaries (a forward's
        intermediates not saved, the backward's gradients of activations, workspaces)."""
        return None if self.peak is None else max(self.peak - self.held, 0)


@dataclass
class MemoryCourse:
    """The memory in use read at the start, the middle and the end of the measured steps: on a
    device with allocator statistics what its allocator holds for tensors, else the process's
    resident memory; with what was still free at the last reading."""

    #: ``"device"`` (the allocator's bytes allocated) or ``"host"`` (the process's RSS).
    memory: str
    #: The measured steps taken before each reading (``0``, the middle, the last).
    steps: list[int] = field(default_factory=list)
    #: Bytes in use at each reading.
    used: list[int] = field(default_factory=list)
    #: Bytes still free at the last reading (the host's available memory; the device's free
    #: memory and what its allocator holds unused); ``None`` when not told.
    free: int | None = None
