"""The seam between the SDK and the host's imports.

Inside a component the backend is the WIT imports (``_wit.WitBackend``);
natively, ``testing.FakeCluster`` installs itself instead. Every call of the
SDK goes through :func:`backend`, so both see exactly the same JSON text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

from .metadata import Gvk


@dataclass(frozen=True)
class WirePatch:
    """A patch as the ``kube`` interface carries it."""

    #: "merge", "json" or "apply".
    type: str
    #: JSON text.
    body: str
    field_manager: str = ""
    force: bool = False


@dataclass(frozen=True)
class WireEvent:
    regarding_kind: Gvk
    regarding_namespace: Optional[str]
    regarding_name: str
    #: "Normal" or "Warning".
    type: str
    reason: str
    action: str
    note: str


class Backend(Protocol):
    """The host's ``context``, ``kube`` and ``secrets`` interfaces. Failed
    ``kube`` and ``secrets`` calls raise :class:`wasmctrl_sdk.ApiError`
    subclasses."""

    def get(self, kind: Gvk, namespace: Optional[str], name: str) -> str: ...
    def list(self, kind: Gvk, namespace: Optional[str], label_selector: Optional[str]) -> list[str]: ...
    def create(self, kind: Gvk, namespace: Optional[str], body: str) -> str: ...
    def replace(self, kind: Gvk, namespace: Optional[str], name: str, body: str) -> str: ...
    def patch(self, kind: Gvk, namespace: Optional[str], name: str, patch: WirePatch) -> str: ...
    def replace_status(self, kind: Gvk, namespace: Optional[str], name: str, body: str) -> str: ...
    def patch_status(self, kind: Gvk, namespace: Optional[str], name: str, patch: WirePatch) -> str: ...
    def delete(self, kind: Gvk, namespace: Optional[str], name: str) -> None: ...
    def record_event(self, event: WireEvent) -> None: ...
    def deadline_remaining_ms(self) -> int: ...
    def cancelled(self) -> bool: ...
    def attempt(self) -> int: ...
    def settings(self) -> str: ...
    def log(self, level: str, message: str, fields: list[tuple[str, str]]) -> None: ...
    def log_enabled(self, level: str) -> bool: ...
    def reveal(self, name: str) -> str: ...
    def http_send(self, request) -> object: ...


_installed: Optional[Backend] = None
_wit: Optional[Backend] = None


def install(fake: Optional[Backend]) -> None:
    """Routes every SDK call to ``fake`` (None: back to the host's imports)."""
    global _installed
    _installed = fake


def installed() -> Optional[Backend]:
    return _installed


def backend() -> Backend:
    global _wit
    if _installed is not None:
        return _installed
    if _wit is None:
        try:
            from ._wit import WitBackend
        except ImportError as e:  # natively, without a FakeCluster
            raise RuntimeError(
                "wasmctrl_sdk: no host to talk to: this code runs outside a wasmctrl "
                "component; in unit tests, create a wasmctrl_sdk.testing.FakeCluster first"
            ) from e
        _wit = WitBackend()
    return _wit
