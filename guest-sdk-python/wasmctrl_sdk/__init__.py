"""wasmctrl-sdk for Python: write a wasmctrl reconciler.

A plugin subclasses :class:`Reconciler` and exports it with :func:`export`;
``wasmctrl build <dir>`` turns it into a component of the
``wasmctrl:reconciler@0.1.1`` world with componentize-py::

    from wasmctrl_sdk import Action, Api, Metadata, Patch, Reconciler, export, kinds, log

    @export
    class Hello(Reconciler):
        def metadata(self):
            return Metadata("hello", "0.1.0", kinds.CONFIG_MAP).permission(
                "", ["configmaps"], ["get", "list", "watch", "patch"])

        def reconcile(self, key, ctx):
            configmaps = Api.namespaced(kinds.CONFIG_MAP, key.require_namespace())
            cm = configmaps.get_opt(key.name)
            if cm is None:
                return Action.done()  # deleted: nothing to do
            keys = str(len(cm.get("data") or {}))
            log.info(f"{key} has {keys} keys", attempt=ctx.attempt)
            configmaps.patch(key.name, Patch.merge(
                {"metadata": {"annotations": {"hello.wasmctrl.dev/keys": keys}}}))
            return Action.requeue_after(300)

Objects are ``dict``s of the API's JSON. Unit tests run natively against
:class:`wasmctrl_sdk.testing.FakeCluster`.
"""

from . import conditions, kinds, log, objects
from .action import Action
from .api import Api, Patch, escape_pointer, op_add, op_remove, op_replace, op_test
from .context import Context
from .errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    Other,
    PermanentError,
    ReconcileError,
    Serialization,
    Timeout,
    TransientError,
    Unavailable,
)
from .events import EventType, Recorder
from .finalizer import Apply, Cleanup, finalizer
from .metadata import Gvk, Kind, Metadata, ObjectKey, WatchMapping
from .reconciler import Reconciler, export

__all__ = [
    "Action",
    "AlreadyExists",
    "Api",
    "ApiError",
    "Apply",
    "Cleanup",
    "Conflict",
    "Context",
    "EventType",
    "Forbidden",
    "Gvk",
    "Invalid",
    "Kind",
    "Metadata",
    "NotFound",
    "ObjectKey",
    "Other",
    "Patch",
    "PermanentError",
    "ReconcileError",
    "Reconciler",
    "Recorder",
    "Serialization",
    "Timeout",
    "TransientError",
    "Unavailable",
    "WatchMapping",
    "conditions",
    "escape_pointer",
    "export",
    "finalizer",
    "kinds",
    "log",
    "objects",
    "op_add",
    "op_remove",
    "op_replace",
    "op_test",
]
