"""Helpers for objects, which the SDK hands out as plain ``dict``s parsed
from the API's JSON."""

from __future__ import annotations

from typing import Optional

from .metadata import ObjectKey


def meta(obj: dict) -> dict:
    """``obj["metadata"]``, or an empty dict."""
    return obj.get("metadata") or {}


def name(obj: dict) -> str:
    """``metadata.name``, or "" if unset."""
    return meta(obj).get("name") or ""


def namespace(obj: dict) -> Optional[str]:
    """``metadata.namespace`` (None for cluster-scoped objects)."""
    return meta(obj).get("namespace")


def key(obj: dict) -> ObjectKey:
    """The object's key: its namespace and name."""
    return ObjectKey(namespace(obj), name(obj))


def is_deleting(obj: dict) -> bool:
    """True once the object is being deleted (``metadata.deletionTimestamp`` is set)."""
    return meta(obj).get("deletionTimestamp") is not None


def finalizers(obj: dict) -> list[str]:
    return list(meta(obj).get("finalizers") or [])


def has_finalizer(obj: dict, finalizer: str) -> bool:
    """True if ``obj`` carries the finalizer ``finalizer``."""
    return finalizer in finalizers(obj)
