"""The finalizer helper: clean up before an object goes away (kube-runtime's
``finalizer()``, for one reconcile in the sandbox)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

from .action import Action
from .api import Api, Patch, op_add, op_remove, op_test
from .errors import ApiError, Conflict, Invalid, NotFound, TransientError
from .objects import is_deleting, meta, name as name_of


@dataclass(frozen=True)
class Apply:
    """The object is live and carries the finalizer: bring the world to its
    desired state. Must be idempotent."""

    object: dict


@dataclass(frozen=True)
class Cleanup:
    """The object is being deleted and still carries the finalizer: undo what
    lives outside its garbage-collected dependents. Once this returns, the
    finalizer is removed and the API server deletes the object. Must be
    idempotent too: a failed removal runs it again."""

    object: dict


Event = Union[Apply, Cleanup]


def finalizer(api: Api, name: str, obj: dict, reconcile: Callable[[Event], Optional[Action]]) -> Action:
    """Runs ``reconcile`` for ``obj`` under the finalizer ``name``:

    - live object without the finalizer → adds it, then calls
      ``reconcile(Apply(patched))``;
    - live object with it → ``reconcile(Apply(obj))``;
    - object being deleted with it → ``reconcile(Cleanup(obj))``; if that
      returns, removes the finalizer and returns cleanup's action;
    - object being deleted without it → nothing; ``Action.done()``.

    Conflict safety: both finalizer writes are JSON patches guarded by a
    ``test`` operation: the add tests that ``metadata.finalizers`` is still
    what ``obj`` showed, the removal that our entry is still at the index
    ``obj`` showed. A concurrent edit makes the patch fail rather than
    clobber the other writer; that failure (``Invalid`` for a failed test,
    ``Conflict`` for a stale object) is raised as a :class:`TransientError`,
    so the key is retried against a fresh read. ``NotFound`` while removing
    means the object is already gone: success.
    """
    object_name = name_of(obj)
    plan, ops = _plan(obj, name)
    if plan == "add":
        try:
            patched = api.patch(object_name, Patch.json(ops))
        except NotFound:
            return Action.done()
        except ApiError as e:
            raise _lost_race("add", name, e) from None
        return _action(reconcile(Apply(patched)))
    if plan == "apply":
        return _action(reconcile(Apply(obj)))
    if plan == "cleanup":
        action = _action(reconcile(Cleanup(obj)))
        try:
            api.patch(object_name, Patch.json(ops))
        except NotFound:
            pass
        except ApiError as e:
            raise _lost_race("remove", name, e) from None
        return action
    return Action.done()


def _action(value: Optional[Action]) -> Action:
    return Action.done() if value is None else value


def _lost_race(what: str, finalizer: str, e: ApiError) -> Exception:
    if isinstance(e, (Invalid, Conflict)):
        return TransientError(
            f"could not {what} finalizer {finalizer!r}: the object changed concurrently ({e.message})"
        )
    return e.to_reconcile_error()


def _plan(obj: dict, name: str) -> tuple[str, list]:
    """What :func:`finalizer` does for ``obj``, and the JSON patch it sends."""
    current = meta(obj).get("finalizers")
    present = current or []
    deleting = is_deleting(obj)
    if not deleting and name in present:
        return "apply", []
    if not deleting:
        if current is None:
            # None also matches the absent key: the first add wins, a second
            # concurrent add fails its test.
            return "add", [op_test("/metadata/finalizers", None), op_add("/metadata/finalizers", [name])]
        return "add", [op_test("/metadata/finalizers", current), op_add("/metadata/finalizers/-", name)]
    if name in present:
        path = f"/metadata/finalizers/{present.index(name)}"
        return "cleanup", [op_test(path, name), op_remove(path)]
    return "nothing", []


__all__ = ["Apply", "Cleanup", "Event", "finalizer"]
