"""Keys, kinds, and what a plugin declares about itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

from .errors import PermanentError


@dataclass(frozen=True)
class ObjectKey:
    """The key of the object a reconcile is asked for."""

    #: None for cluster-scoped objects.
    namespace: Optional[str]
    name: str

    @staticmethod
    def namespaced(namespace: str, name: str) -> "ObjectKey":
        return ObjectKey(namespace, name)

    @staticmethod
    def cluster(name: str) -> "ObjectKey":
        return ObjectKey(None, name)

    def require_namespace(self) -> str:
        """The namespace, or a :class:`PermanentError` for a key without one
        (a namespaced kind's reconciler can only get such a key by mistake)."""
        if self.namespace is None:
            raise PermanentError(f"key {self} has no namespace")
        return self.namespace

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace is not None else self.name


@dataclass(frozen=True)
class Gvk:
    """A Kubernetes group/version/kind; the core group is ""."""

    group: str
    version: str
    kind: str

    @property
    def api_version(self) -> str:
        """``apps/v1``, or ``v1`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass(frozen=True)
class Kind:
    """A kind the SDK can read and write: its group/version/kind, its plural
    resource name (as permissions name it) and its scope.

    ``wasmctrl_sdk.kinds`` has the common built-in kinds; declare your own::

        WEBAPP = Kind("demo.wasmctrl.dev", "v1alpha1", "WebApp", "webapps")
    """

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def gvk(self) -> Gvk:
        return Gvk(self.group, self.version, self.kind)

    @property
    def api_version(self) -> str:
        return self.gvk.api_version

    def new(self, name: str, **fields) -> dict:
        """A new object of this kind: ``apiVersion``, ``kind``,
        ``metadata.name`` and the given top-level fields (``spec=…``)."""
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": {"name": name}, **fields}

    def controller_owner_ref(self, obj: dict) -> Optional[dict]:
        """An ownerReference making ``obj`` (of this kind) the controller of
        another object: ``controller: true``, ``blockOwnerDeletion: true``.
        Put it in the owned object's ``metadata.ownerReferences``: the API
        server garbage-collects the owned object with its owner, and the host
        maps the owned object's events to the owner's key (``Metadata.owns``).

        None if ``obj`` has no name or uid (it was not read from the API).
        """
        meta = obj.get("metadata") or {}
        name, uid = meta.get("name"), meta.get("uid")
        if not name or not uid:
            return None
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": name,
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


KindLike = Union[Kind, Gvk]


def gvk_of(kind: KindLike) -> Gvk:
    return kind.gvk if isinstance(kind, Kind) else kind


@dataclass(frozen=True)
class WatchMapping:
    """How a watched object maps to the key of the reconciled object:
    :data:`OWNER`, :data:`SAME_NAME` or :meth:`label`."""

    #: "owner", "same-name" or "label".
    how: str
    #: The label for "label".
    label_name: Optional[str] = None

    @staticmethod
    def label(name: str) -> "WatchMapping":
        """To the reconciled object (same namespace) named by this label's value."""
        return WatchMapping("label", name)


#: Through the watched object's ownerReferences to the reconciled kind.
WatchMapping.OWNER = WatchMapping("owner")  # type: ignore[attr-defined]
#: To the reconciled object with the same namespace and name.
WatchMapping.SAME_NAME = WatchMapping("same-name")  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Permission:
    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]


@dataclass
class Metadata:
    """What a plugin reconciles, watches and needs permission for.

    Built with chained calls::

        Metadata("webapp", "0.1.0", WEBAPP).owns(kinds.DEPLOYMENT) \\
            .permission("apps", ["deployments"], ["list", "watch", "patch"])
    """

    name: str
    version: str
    reconciles: KindLike
    owned: list[Gvk] = field(default_factory=list)
    watched: list[tuple[Gvk, WatchMapping]] = field(default_factory=list)
    permissions: list[Permission] = field(default_factory=list)

    def owns(self, kind: KindLike) -> "Metadata":
        """Objects of this kind controlled by a reconciled object enqueue their owner."""
        self.owned.append(gvk_of(kind))
        return self

    def watches(self, kind: KindLike, mapping: WatchMapping) -> "Metadata":
        """Objects of this kind enqueue the key ``mapping`` names."""
        self.watched.append((gvk_of(kind), mapping))
        return self

    def permission(self, group: str, resources: Sequence[str], verbs: Sequence[str]) -> "Metadata":
        """The plugin needs ``verbs`` on ``resources`` of API ``group`` ("" is
        core). The host refuses to load a plugin asking for more than its grant."""
        for what, values in (("resources", resources), ("verbs", verbs)):
            if isinstance(values, str):
                raise TypeError(f"permission {what}: a list of strings, not the string {values!r}")
        self.permissions.append(Permission(group, tuple(resources), tuple(verbs)))
        return self

    @property
    def for_(self) -> Gvk:
        return gvk_of(self.reconciles)
