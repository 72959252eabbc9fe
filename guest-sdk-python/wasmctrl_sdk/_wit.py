"""The backend inside a component: the ``wasmctrl:reconciler`` imports, as
componentize-py generates them (module ``wit_world``). Importing this module
natively fails with ImportError, which :mod:`._host` turns into a clear error.
"""

from __future__ import annotations

from typing import Optional

from componentize_py_types import Err
from wit_world.imports import context as wit_context
from wit_world.imports import kube as wit_kube
from wit_world.imports import secrets as wit_secrets

try:
    # Beside wasi:http's `types` (the http-reconciler world), componentize-py
    # names the package's own `types` in full.
    from wit_world.imports import wasmctrl_reconciler_types as wit_types
except ImportError:
    from wit_world.imports import types as wit_types

# Imported now, not at the first request: componentize-py keeps only the
# modules imported while it pre-initializes the component.
from . import _wit_http, errors
from ._host import WireEvent, WirePatch
from .metadata import Gvk, Metadata

_LEVELS = {
    "trace": wit_types.LogLevel.TRACE,
    "debug": wit_types.LogLevel.DEBUG,
    "info": wit_types.LogLevel.INFO,
    "warn": wit_types.LogLevel.WARN,
    "error": wit_types.LogLevel.ERROR,
}

_API_ERRORS = {
    wit_types.ApiError_NotFound: errors.NotFound,
    wit_types.ApiError_Conflict: errors.Conflict,
    wit_types.ApiError_AlreadyExists: errors.AlreadyExists,
    wit_types.ApiError_Forbidden: errors.Forbidden,
    wit_types.ApiError_Invalid: errors.Invalid,
    wit_types.ApiError_Timeout: errors.Timeout,
    wit_types.ApiError_Unavailable: errors.Unavailable,
    wit_types.ApiError_Other: errors.Other,
}


def _gvk(kind: Gvk) -> wit_types.Gvk:
    return wit_types.Gvk(group=kind.group, version=kind.version, kind=kind.kind)


def _patch(patch: WirePatch) -> wit_kube.ObjectPatch:
    if patch.type == "merge":
        return wit_kube.ObjectPatch_Merge(patch.body)
    if patch.type == "json":
        return wit_kube.ObjectPatch_Json(patch.body)
    return wit_kube.ObjectPatch_Apply(
        wit_kube.ApplyPatch(body=patch.body, field_manager=patch.field_manager, force=patch.force)
    )


def _call(f, *args):
    try:
        return f(*args)
    except Err as e:
        cls = _API_ERRORS.get(type(e.value), errors.Other)
        raise cls(getattr(e.value, "value", str(e.value))) from None


class WitBackend:
    """Every SDK call, through the host's imports."""

    def get(self, kind, namespace, name):
        return _call(wit_kube.get, _gvk(kind), namespace, name)

    def list(self, kind, namespace, label_selector):
        return _call(wit_kube.list, _gvk(kind), namespace, label_selector)

    def create(self, kind, namespace, body):
        return _call(wit_kube.create, _gvk(kind), namespace, body)

    def replace(self, kind, namespace, name, body):
        return _call(wit_kube.replace, _gvk(kind), namespace, name, body)

    def patch(self, kind, namespace, name, patch):
        return _call(wit_kube.patch, _gvk(kind), namespace, name, _patch(patch))

    def replace_status(self, kind, namespace, name, body):
        return _call(wit_kube.replace_status, _gvk(kind), namespace, name, body)

    def patch_status(self, kind, namespace, name, patch):
        return _call(wit_kube.patch_status, _gvk(kind), namespace, name, _patch(patch))

    def delete(self, kind, namespace, name):
        _call(wit_kube.delete, _gvk(kind), namespace, name)

    def record_event(self, event: WireEvent):
        _call(
            wit_kube.record_event,
            wit_kube.Event(
                regarding_kind=_gvk(event.regarding_kind),
                regarding_namespace=event.regarding_namespace,
                regarding_name=event.regarding_name,
                type=wit_kube.EventType.WARNING if event.type == "Warning" else wit_kube.EventType.NORMAL,
                reason=event.reason,
                action=event.action,
                note=event.note,
            ),
        )

    def deadline_remaining_ms(self):
        return wit_context.deadline_remaining_ms()

    def cancelled(self):
        return wit_context.cancelled()

    def attempt(self):
        return wit_context.attempt()

    def settings(self):
        return wit_context.settings()

    def log(self, level, message, fields):
        wit_context.log(_LEVELS[level], message, fields)

    def log_enabled(self, level):
        return wit_context.log_enabled(_LEVELS[level])

    def reveal(self, name):
        return _call(wit_secrets.reveal, name)

    def http_send(self, request):
        return _wit_http.send(request)


def metadata_to_wit(m: Metadata) -> wit_types.PluginMetadata:
    def mapping(w) -> wit_types.WatchMapping:
        if w.how == "owner":
            return wit_types.WatchMapping_Owner()
        if w.how == "same-name":
            return wit_types.WatchMapping_SameName()
        return wit_types.WatchMapping_Label(w.label_name or "")

    return wit_types.PluginMetadata(
        name=m.name,
        version=m.version,
        for_=_gvk(m.for_),
        owns=[_gvk(k) for k in m.owned],
        watches=[wit_types.Watch(kind=_gvk(k), mapping=mapping(w)) for k, w in m.watched],
        permissions=[
            wit_types.Permission(group=p.group, resources=list(p.resources), verbs=list(p.verbs))
            for p in m.permissions
        ],
    )


def webhook_to_wit(validating: bool, w) -> wit_types.Webhook:
    return wit_types.Webhook(
        kind=wit_types.WebhookKind.VALIDATING if validating else wit_types.WebhookKind.MUTATING,
        rules=[
            wit_types.WebhookRule(
                operations=list(ops),
                groups=[group],
                versions=[version],
                resources=list(resources),
                scope=wit_types.RuleScope.ANY,
            )
            for ops, group, version, resources in w.rules
        ],
        failure_policy=wit_types.FailurePolicy.IGNORE if w.ignore_failures_ else wit_types.FailurePolicy.FAIL,
        timeout_seconds=w.timeout_seconds_,
        namespace_selector=w.namespace_selector_,
        object_selector=w.object_selector_,
    )


def verdict_to_wit(v) -> wit_types.AdmissionResponse:
    return wit_types.AdmissionResponse(
        allowed=v.allowed,
        code=v.code,
        message=v.message,
        causes=[wit_types.FieldCause(field=c.field, reason=c.reason, message=c.message) for c in v.causes],
        warnings=list(v.warnings),
        audit_annotations=[],
        patched=v.patched,
    )


def action_to_wit(requeue: bool, requeue_after_ms: int) -> wit_types.Action:
    return wit_types.Action(requeue=requeue, requeue_after_ms=requeue_after_ms)


def reconcile_error(permanent: bool, message: str) -> Err:
    if permanent:
        return Err(wit_types.ReconcileError_Permanent(message))
    return Err(wit_types.ReconcileError_Transient(message))


def key_from_wit(key: wit_types.ObjectKey) -> tuple[Optional[str], str]:
    return key.namespace, key.name
