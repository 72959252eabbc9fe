"""Kubernetes Events about an object (events.k8s.io/v1 semantics), recorded
through the host."""

from __future__ import annotations

from enum import Enum

from . import _host
from .metadata import KindLike, ObjectKey, gvk_of
from .objects import key as key_of


class EventType(Enum):
    """Whether an event is routine or worth someone's attention."""

    NORMAL = "Normal"
    WARNING = "Warning"


class Recorder:
    """Records events regarding one object.

    The host fills in what the WIT ``event`` record does not carry: the
    reporting controller (the plugin), the reporting instance, the event time
    and the regarding object's uid. See them with ``kubectl events --for
    webapp/hello``::

        Recorder(WEBAPP, app).publish(EventType.NORMAL, "Synced", "Reconcile", "copied 3 keys")
    """

    def __init__(self, kind: KindLike, obj: dict):
        self.kind = gvk_of(kind)
        self.key = key_of(obj)

    @staticmethod
    def for_key(kind: KindLike, key: ObjectKey) -> "Recorder":
        """A recorder for events regarding the object of ``kind`` at ``key``
        (for example one that could not be read)."""
        recorder = Recorder.__new__(Recorder)
        recorder.kind = gvk_of(kind)
        recorder.key = key
        return recorder

    def publish(self, type: EventType, reason: str, action: str, note: str) -> None:
        """Records an event: ``reason`` is CamelCase and machine-readable
        (``Ready``), ``action`` what the controller did or failed to do
        (``Reconcile``), ``note`` a human-readable sentence. Raises
        :class:`ApiError`; events are best-effort signals, so callers often
        log a failure rather than fail the reconcile."""
        if not isinstance(type, EventType):
            raise TypeError(f"publish: an EventType, not {type!r}")
        _host.backend().record_event(
            _host.WireEvent(self.kind, self.key.namespace, self.key.name, type.value, reason, action, note)
        )


__all__ = ["EventType", "Recorder"]
