"""``Api``: get/list/create/replace/patch/apply/delete over the host's
``kube`` interface, kube-rs style, with objects as ``dict``s."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

from . import _host
from .errors import Invalid, NotFound, Serialization
from .metadata import Kind

#: One RFC 6902 operation, as a dict: see :func:`op_test` and friends.
PatchOp = dict


def op_test(path: str, value: Any) -> PatchOp:
    """Fails the whole patch unless the value at ``path`` equals ``value``
    (``None`` also matches an absent key whose parent exists)."""
    return {"op": "test", "path": path, "value": value}


def op_add(path: str, value: Any) -> PatchOp:
    return {"op": "add", "path": path, "value": value}


def op_replace(path: str, value: Any) -> PatchOp:
    return {"op": "replace", "path": path, "value": value}


def op_remove(path: str) -> PatchOp:
    return {"op": "remove", "path": path}


def escape_pointer(segment: str) -> str:
    """Escapes one JSON-pointer segment (RFC 6901: ``~`` → ``~0``, ``/`` →
    ``~1``), e.g. a label key in ``/metadata/labels/<key>``."""
    return segment.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class Patch:
    """A patch body, serialized to JSON when sent. Build one with
    :meth:`merge`, :meth:`json` or :meth:`apply`."""

    type: str
    body: Any
    field_manager: str = ""
    force: bool = False

    @staticmethod
    def merge(body: Any) -> "Patch":
        """JSON merge patch (RFC 7386): objects merge, lists are replaced
        whole, ``None`` deletes a key."""
        return Patch("merge", body)

    @staticmethod
    def json(ops: list) -> "Patch":
        """JSON patch (RFC 6902): a list of operations (:func:`op_test`, …).
        Applied atomically: a failed ``test`` fails the whole patch with
        :class:`Invalid`."""
        return Patch("json", ops)

    @staticmethod
    def apply(body: Any, field_manager: str, force: bool = False) -> "Patch":
        """Server-side apply of the (partial) object ``body`` as
        ``field_manager``; ``force`` takes over fields another manager owns
        instead of failing with :class:`Conflict`. ``body`` must carry
        ``apiVersion``, ``kind`` and ``metadata.name`` (see :meth:`Api.apply`)."""
        return Patch("apply", body, field_manager, force)

    def _wire(self) -> _host.WirePatch:
        return _host.WirePatch(self.type, encode(self.body), self.field_manager, self.force)


def encode(value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise Serialization(f"cannot serialize the request body: {e}") from None


def decode(text: str, what: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise Serialization(f"the {what} returned is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise Serialization(f"the {what} returned is not a JSON object")
    return value


class Api:
    """A handle on the objects of one kind, in one namespace or in all of them.

    Every call goes through the host, which checks it against the plugin's
    permission grant (verb × group/resource × namespace; a denied call is
    :class:`Forbidden`) and bounds it by the reconcile's deadline
    (:class:`Timeout`). ``get`` and ``list`` of a kind the plugin watches are
    served from the host's shared cache, which may lag a write made a moment
    ago; writes return the object as the API server stored it.
    """

    def __init__(self, kind: Kind, namespace: Optional[str] = None):
        if not isinstance(kind, Kind):
            raise TypeError(f"Api needs a wasmctrl_sdk.Kind, not {type(kind).__name__}")
        self.kind = kind
        #: None: all namespaces, or a cluster-scoped kind.
        self.namespace = namespace

    @staticmethod
    def namespaced(kind: Kind, namespace: str) -> "Api":
        """Objects of a namespaced kind in ``namespace``."""
        if not kind.namespaced:
            raise ValueError(f"{kind.kind} is cluster-scoped: use Api.all({kind.kind.upper()})")
        if not namespace:
            raise ValueError("Api.namespaced: the namespace is empty")
        return Api(kind, namespace)

    @staticmethod
    def all(kind: Kind) -> "Api":
        """Objects in every namespace (for a namespaced kind only ``list``
        makes sense), or of a cluster-scoped kind."""
        return Api(kind, None)

    def __repr__(self) -> str:
        return f"Api({self.kind.kind}, namespace={self.namespace!r})"

    def _decode(self, text: str) -> dict:
        return decode(text, self.kind.kind)

    def get(self, name: str) -> dict:
        """The object named ``name``; :class:`NotFound` if it does not exist."""
        return self._decode(_host.backend().get(self.kind.gvk, self.namespace, name))

    def get_opt(self, name: str) -> Optional[dict]:
        """The object named ``name``, or None if it does not exist."""
        try:
            return self.get(name)
        except NotFound:
            return None

    def list(self, label_selector: Optional[str] = None) -> list[dict]:
        """Every object of the kind in this handle's scope, or those whose
        labels match ``label_selector`` (``app=web,tier!=cache``)."""
        items = _host.backend().list(self.kind.gvk, self.namespace, label_selector)
        return [self._decode(item) for item in items]

    def create(self, obj: dict) -> dict:
        """Creates ``obj`` (:class:`AlreadyExists` if the name is taken) and
        returns it as stored."""
        body = encode(self._typed(obj))
        return self._decode(_host.backend().create(self.kind.gvk, self.namespace, body))

    def replace(self, name: str, obj: dict) -> dict:
        """Replaces the object named ``name`` with ``obj`` (PUT). With
        ``metadata.resourceVersion`` set, a concurrent write makes this fail
        with :class:`Conflict`. The status is not changed."""
        body = encode(self._typed(obj))
        return self._decode(_host.backend().replace(self.kind.gvk, self.namespace, name, body))

    def patch(self, name: str, patch: Patch) -> dict:
        """Patches the object named ``name`` and returns it as stored."""
        return self._decode(_host.backend().patch(self.kind.gvk, self.namespace, name, patch._wire()))

    def apply(self, obj: dict, field_manager: str, force: bool = False) -> dict:
        """Server-side apply of ``obj`` as ``field_manager``: creates the
        object if it does not exist, otherwise sets exactly the fields ``obj``
        sets and removes fields this manager set before but ``obj`` no longer
        does. ``force`` takes ownership of fields another manager set (what a
        controller wants for the objects it owns). The name comes from
        ``metadata.name``; ``apiVersion`` and ``kind`` from this handle's kind."""
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            raise Invalid("apply: the object has no metadata.name")
        return self.patch(name, Patch.apply(self._typed(obj), field_manager, force))

    def patch_status(self, name: str, patch: Patch) -> dict:
        """Patches the status subresource of the object named ``name``."""
        wire = patch._wire()
        return self._decode(_host.backend().patch_status(self.kind.gvk, self.namespace, name, wire))

    def apply_status(self, name: str, status: Any, field_manager: str, force: bool = False) -> dict:
        """Server-side apply of ``status`` to the status subresource of the
        object named ``name`` (the body sent is ``{apiVersion, kind,
        metadata: {name}, status}``). Fields this manager set before and
        ``status`` no longer sets are removed."""
        body = {"apiVersion": self.kind.api_version, "kind": self.kind.kind, "metadata": {"name": name}, "status": status}
        return self.patch_status(name, Patch.apply(body, field_manager, force))

    def replace_status(self, name: str, obj: dict) -> dict:
        """Replaces the status of the object named ``name`` with ``obj``'s
        (PUT to the status subresource, guarded by ``resourceVersion``)."""
        body = encode(self._typed(obj))
        return self._decode(_host.backend().replace_status(self.kind.gvk, self.namespace, name, body))

    def delete(self, name: str) -> bool:
        """Deletes the object named ``name`` (in the background: dependents
        are garbage-collected, and finalizers may keep the object a while).
        Returns False if it did not exist."""
        try:
            _host.backend().delete(self.kind.gvk, self.namespace, name)
            return True
        except NotFound:
            return False

    def _typed(self, obj: dict) -> dict:
        """``obj`` with this kind's ``apiVersion`` and ``kind`` (as typed
        resources in the Rust SDK always serialize them)."""
        if not isinstance(obj, dict):
            raise Serialization(f"a {self.kind.kind} is a dict, not {type(obj).__name__}")
        rest = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        return {"apiVersion": self.kind.api_version, "kind": self.kind.kind, **rest}
