"""wasmctrl-sdk for Python: write a wasmctrl reconciler.

A plugin subclasses :class:`Reconciler` and exports it with :func:`export`;
``wasmctrl build <dir>`` turns it into a component of the
``wasmctrl:reconciler@0.1.3`` world with componentize-py. Objects are
``dict``s of the API's JSON. Unit tests run natively against
:class:`wasmctrl_sdk.testing.FakeCluster`. The ``hello`` plugin
(``plugins/hello-py/hello.py``) is a complete one, and
``docs/writing-plugins.md`` the guide.
"""

from . import admission, conditions, http, kinds, log, objects, secrets
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
    "admission",
    "conditions",
    "escape_pointer",
    "export",
    "finalizer",
    "kinds",
    "log",
    "http",
    "objects",
    "secrets",
    "op_add",
    "op_remove",
    "op_replace",
    "op_test",
]
