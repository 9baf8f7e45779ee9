"""Reversible patches: every attribute set or hook registered here is undone by ``restore()``.

One owner for every change torchdoctor makes to torch. The capture session's :class:`Patcher`
is the process's owner while it is installed; the sync watcher (and anything else that patches
while a session runs) takes a :meth:`Patcher.child` of it, so the session's restore also undoes
what a child left behind, and every patcher can map a wrapper it (or a relative) installed back
to the original it wraps (:meth:`Patcher.original`) - a torch function mode is handed the
wrapper, not the method, for a call of a patched ``Tensor`` method.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

_MISSING = object()

#: Code of our wrappers that call an original written in C (``Tensor.to``): an exception raised
#: there comes from the original (the script's arguments), though its innermost Python frame is
#: ours. See :func:`passes_through`.
PASS_THROUGH_CODE: set[Any] = set()


def passes_through(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``fn`` as a wrapper whose exceptions are its original's (a C function's)."""
    PASS_THROUGH_CODE.add(fn.__code__)
    return fn


@passes_through
def call_op(func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """The script's torch call, made by a torch function mode of ours (the sync finder's): what
    it raises is the script's, not torchdoctor's (a shape mismatch, an allocation refused)."""
    return func(*args, **kwargs)


def raised_by_torchdoctor(exc: BaseException) -> bool:
    """Whether ``exc`` was raised in torchdoctor's own code (its innermost frame is ours), not
    in the script, torch or a library that our wrappers called on the script's behalf."""
    from ._frames import file_kind

    tb = exc.__traceback__
    if tb is None or not isinstance(exc, Exception):
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    if tb.tb_frame.f_code in PASS_THROUGH_CODE:
        return False  # an original written in C raised (the script's arguments to Tensor.to)
    # The demo's scenario plays a user's part: file_kind counts it as the user's.
    return file_kind(tb.tb_frame.f_code.co_filename) == "torchdoctor"


#: The patcher that owns this process's patches while a capture session is installed.
_owner: Patcher | None = None
#: The ids of the hooks torchdoctor has on modules now (hook ids are unique in the process).
_hook_ids: set[int] = set()
#: Attributes torchdoctor set on module instances now (the compile trial's ``forward``), by the
#: module's id: name -> the module's own value before (``_MISSING``: it had none).
_module_attrs: dict[int, dict[str, Any]] = {}


class Patcher:
    """Sets attributes and registers hooks, and undoes all of it in reverse order.

    ``restore()`` is idempotent and keeps going when one undo fails, so a half-installed
    capture (an error during ``install``) is still fully undone.
    """

    def __init__(self, originals: dict[Any, Any] | None = None) -> None:
        self._undo: list[Callable[[], None]] = []
        #: wrapper -> what it replaced, shared by a patcher and its children.
        self._originals: dict[Any, Any] = {} if originals is None else originals

    @classmethod
    def for_process(cls) -> Patcher:
        """A child of the installed session's patcher, or a new patcher when none is installed."""
        return _owner.child() if _owner is not None else cls()

    def own_process(self) -> None:
        """Make this the process's owner (:meth:`for_process`) until it is restored."""
        global _owner
        if _owner is not None and _owner is not self:
            raise RuntimeError("another torchdoctor capture owns this process's patches")
        _owner = self
        self.on_restore(_release_owner)

    def child(self) -> Patcher:
        """A patcher whose patches this one also undoes, sharing the map of originals."""
        child = Patcher(self._originals)
        self.on_restore(child.restore)
        return child

    def set(self, owner: Any, name: str, value: Any) -> Any:
        """Replace ``owner.name`` with ``value``; returns the original (possibly inherited) value."""
        own = vars(owner).get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        original = getattr(owner, name)
        setattr(owner, name, value)
        self._remember(value, original)
        on_module = isinstance(owner, torch.nn.Module)
        if on_module:
            _module_attrs.setdefault(id(owner), {}).setdefault(name, own)

        def undo() -> None:
            self._originals.pop(_key(value), None)
            if on_module:
                _module_attrs.get(id(owner), {}).pop(name, None)
                if not _module_attrs.get(id(owner), True):
                    del _module_attrs[id(owner)]
            if own is _MISSING:
                # The attribute was inherited (e.g. Tensor.to from TensorBase): remove ours.
                if name in vars(owner):
                    delattr(owner, name)
            else:
                setattr(owner, name, own)

        self._undo.append(undo)
        return original

    def original(self, fn: Any) -> Any:
        """What ``fn`` wraps, if it is a wrapper this patcher (or a relative) installed; else ``fn``."""
        return self._originals.get(_key(fn), fn)

    def set_state(self, read: Callable[[], Any], write: Callable[[Any], None], value: Any) -> Any:
        """Change process state that is no attribute (``torch.set_num_threads``): ``write(value)``
        now, and on restore ``write`` what ``read()`` gave before; returns that value."""
        before = read()
        write(value)
        self._undo.append(lambda: write(before))
        return before

    def hook(self, handle: Any) -> None:
        """Remember a ``RemovableHandle`` (module/optimizer hook) to remove on restore."""
        _hook_ids.add(handle.id)

        def remove() -> None:
            handle.remove()
            _hook_ids.discard(handle.id)

        self._undo.append(remove)

    def keep_modules_picklable(self) -> None:
        """While patched, a module pickled or copied (``torch.save(model)``,
        ``copy.deepcopy(model)`` for an EMA) leaves torchdoctor's hooks and the attributes it
        set on the module (the compile trial's ``forward``) out of its state: they hold the
        session or local functions, which neither pickle nor copy, and are not the script's."""
        module_cls = torch.nn.Module
        original = module_cls.__getstate__

        def __getstate__(module: Any) -> Any:
            state = _without_our_hooks(original(module))
            for name, own in _module_attrs.get(id(module), {}).items():
                if own is _MISSING:
                    state.pop(name, None)
                else:
                    state[name] = own
            return state

        self.set(module_cls, "__getstate__", __getstate__)

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

    def _remember(self, wrapper: Any, original: Any) -> None:
        # The original of a wrapper of a wrapper is the first one's original.
        self._originals[_key(wrapper)] = self._originals.get(_key(original), original)


def _key(fn: Any) -> Any:
    """Functions are keyed by identity (some callables are unhashable or compare by value)."""
    return id(fn)


def _release_owner() -> None:
    global _owner
    _owner = None


def _without_our_hooks(state: Any) -> Any:
    """A module's state with torchdoctor's hooks taken out of its hook dicts (copies)."""
    if not _hook_ids or not isinstance(state, dict):
        return state
    for name, value in list(state.items()):
        if name.endswith(_HOOK_DICTS) and isinstance(value, dict) and _hook_ids & value.keys():
            state[name] = OrderedDict((k, v) for k, v in value.items() if k not in _hook_ids)
    return state


#: How the names of a module's hook dicts end (``_forward_pre_hooks``,
#: ``_forward_hooks_always_called``, ``_forward_hooks_with_kwargs``...).
_HOOK_DICTS = ("_hooks", "_hooks_always_called", "_hooks_with_kwargs")
