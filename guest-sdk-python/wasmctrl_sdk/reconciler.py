"""The one class a plugin implements, and the call that exports it."""

from __future__ import annotations

import sys
import traceback
from typing import Optional, Union

from . import _host, admission
from .action import Action
from .context import Context
from .errors import ApiError, PermanentError, ReconcileError, TransientError
from .metadata import Metadata, ObjectKey


class Reconciler:
    """Subclass it, implement :meth:`metadata` and :meth:`reconcile`, and
    export it with :func:`export`.

    The host may call many reconciles, for any keys, on one instance of the
    component (instance mode ``reuse``): the reconciler object and module
    globals can then outlive a reconcile. Keep per-reconcile state in local
    variables; the SDK itself keeps none (each reconcile gets a new
    :class:`Context`).
    """

    def metadata(self) -> Metadata:
        """What the plugin reconciles, watches and needs permission for.
        Called when the host loads the plugin (and on every hot swap)."""
        raise NotImplementedError

    def reconcile(self, key: ObjectKey, ctx: Context) -> Optional[Action]:
        """Bring the object named by ``key`` to its desired state; return an
        :class:`Action` (None means ``Action.done()``) or raise a
        :class:`ReconcileError` (an escaping :class:`ApiError` counts as
        transient or permanent by its kind). May be called for objects that
        no longer exist (the reconcile then sees NotFound and cleans up)."""
        raise NotImplementedError


def metadata_of(reconciler: Reconciler) -> Metadata:
    m = reconciler.metadata()
    if not isinstance(m, Metadata):
        raise TypeError(f"{type(reconciler).__name__}.metadata() returned {type(m).__name__}, not a Metadata")
    return m


def run(reconciler: Reconciler, key: ObjectKey, *, contain_unexpected: bool) -> Action:
    """One reconcile with a fresh :class:`Context`: its action, or a
    :class:`ReconcileError`. ``contain_unexpected`` turns any other exception
    into a transient error (and logs its traceback), as the component does;
    tests leave it off so a bug shows its own traceback."""
    ctx = Context()
    try:
        result = reconciler.reconcile(key, ctx)
    except ReconcileError:
        raise
    except ApiError as e:
        raise e.to_reconcile_error() from e
    except Exception as e:
        if not contain_unexpected:
            raise
        _host.backend().log("error", f"reconcile of {key} raised:\n{traceback.format_exc()}", [])
        raise TransientError(f"unexpected {type(e).__name__}: {e}") from e
    finally:
        ctx._close()
    if result is None:
        return Action.done()
    if not isinstance(result, Action):
        raise PermanentError(f"reconcile returned {type(result).__name__}, not an Action")
    return result


def _instance(what, cls, role):
    if what is None:
        return None
    instance = what() if isinstance(what, type) else what
    if not isinstance(instance, cls):
        raise TypeError(f"export: {role} {what!r} is not a wasmctrl_sdk.admission.{cls.__name__}")
    return instance


def _not_served(export: str) -> "admission.Verdict":
    return admission.Verdict(
        allowed=False, code=500, message=f"this plugin declares no webhook that `{export}` answers"
    )


def _contained(review) -> "admission.Verdict":
    """A review whose unexpected exception is a 500 denial with its
    traceback in the host's log (the failure policy is for traps)."""
    try:
        return review()
    except Exception as e:
        _host.backend().log("error", f"admission review raised:\n{traceback.format_exc()}", [])
        return admission.Verdict(allowed=False, code=500, message=f"unexpected {type(e).__name__}: {e}")


def export(reconciler: Union[type, Reconciler], *, validator=None, defaulter=None):
    """Exports a :class:`Reconciler` (class or instance) as the component's
    ``metadata`` and ``reconcile``, and a
    :class:`~wasmctrl_sdk.admission.Validator` and
    :class:`~wasmctrl_sdk.admission.Defaulter` (classes or instances) as its
    admission webhooks when given. Use it once, as a class decorator or a
    call, in the module ``wasmctrl build`` componentizes (``[tool.wasmctrl]
    module`` in pyproject.toml)::

        @wasmctrl_sdk.export
        class Hello(Reconciler): ...

    A class is instantiated once per component instance, when the component
    is built (componentize-py snapshots the initialised interpreter): its
    ``__init__`` must not call the host. Natively (unit tests) this only
    returns its argument.
    """
    instance = reconciler() if isinstance(reconciler, type) else reconciler
    if not isinstance(instance, Reconciler):
        raise TypeError(f"export: {reconciler!r} is not a wasmctrl_sdk.Reconciler")
    checker = _instance(validator, admission.Validator, "validator")
    defaults = _instance(defaulter, admission.Defaulter, "defaulter")
    try:
        import wit_world
    except ImportError:
        return reconciler
    from . import _wit

    class WitWorld(wit_world.WitWorld):
        def metadata(self):
            return _wit.metadata_to_wit(metadata_of(instance))

        def reconcile(self, key):
            namespace, name = _wit.key_from_wit(key)
            try:
                action = run(instance, ObjectKey(namespace, name), contain_unexpected=True)
            except ReconcileError as e:
                raise _wit.reconcile_error(e.permanent, e.message) from None
            return _wit.action_to_wit(action.requeue_, action.requeue_after_ms)

        def outbound(self):
            # Python plugins declare no destinations: the host config's
            # `outbound` grant alone decides what is sent.
            return []

        def webhooks(self):
            declared = []
            if checker is not None:
                declared.append(_wit.webhook_to_wit(True, checker.webhook()))
            if defaults is not None:
                declared.append(_wit.webhook_to_wit(False, defaults.webhook()))
            return declared

        def validate(self, request):
            if checker is None:
                return _wit.verdict_to_wit(_not_served("validate"))
            return _wit.verdict_to_wit(_contained(lambda: admission.validate(checker, request)))

        def mutate(self, request):
            if defaults is None:
                return _wit.verdict_to_wit(_not_served("mutate"))
            return _wit.verdict_to_wit(_contained(lambda: admission.mutate(defaults, request)))

    # componentize-py looks for `WitWorld` in the module it componentizes:
    # the module calling export.
    sys._getframe(1).f_globals["WitWorld"] = WitWorld
    return reconciler
