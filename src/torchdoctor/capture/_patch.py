"""Reversible patches: every attribute set or hook registered here is undone by ``restore()``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_MISSING = object()


class Patcher:
    """Sets attributes and registers hooks, and undoes all of it in reverse order.

    ``restore()`` is idempotent and keeps going when one undo fails, so a half-installed
    capture (an error during ``install``) is still fully undone.
    """

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def set(self, owner: Any, name: str, value: Any) -> Any:
        """Replace ``owner.name`` with ``value``; returns the original (possibly inherited) value."""
        own = vars(owner).get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        original = getattr(owner, name)
        setattr(owner, name, value)

        def undo() -> None:
            if own is _MISSING:
                # The attribute was inherited (e.g. Tensor.to from TensorBase): remove ours.
                if name in vars(owner):
                    delattr(owner, name)
            else:
                setattr(owner, name, own)

        self._undo.append(undo)
        return original

    def hook(self, handle: Any) -> None:
        """Remember a ``RemovableHandle`` (module/optimizer hook) to remove on restore."""
        self._undo.append(handle.remove)

    def on_restore(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` during restore (in reverse order of registration)."""
        self._undo.append(fn)

    @property
    def active(self) -> bool:
        return bool(self._undo)

    def restore(self) -> list[BaseException]:
        """Undo everything; returns the errors met (restore never stops half way)."""
        errors: list[BaseException] = []
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except BaseException as exc:  # noqa: BLE001 - keep undoing the rest
                errors.append(exc)
        return errors
