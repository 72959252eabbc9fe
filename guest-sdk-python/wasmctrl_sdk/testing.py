"""Unit-test a reconciler natively, against an in-memory fake API server.

::

    import unittest
    from wasmctrl_sdk import Action, Api, ObjectKey, kinds
    from wasmctrl_sdk.testing import FakeCluster

    class LabelerTest(unittest.TestCase):
        def test_labels(self):
            cluster = FakeCluster()
            configmaps = Api.namespaced(kinds.CONFIG_MAP, "default")
            configmaps.create(kinds.CONFIG_MAP.new("app"))
            self.assertEqual(cluster.reconcile(Labeler(), ObjectKey("default", "app")), Action.done())
            self.assertEqual(configmaps.get("app")["metadata"]["labels"]["seen"], "yes")
            self.assertEqual(cluster.unused_permissions(Labeler()), [])

While a :class:`FakeCluster` is installed (from its creation until
:meth:`FakeCluster.close`, or the next one), every SDK call (``Api``,
events, ``Context``, logging) goes to it; tests use the same ``Api`` to set
the scene and to look at the result. During :meth:`FakeCluster.reconcile`
each call is checked against the reconciler's declared permissions, as the
host checks it against the grant: a call the metadata does not cover fails
with :class:`Forbidden`.

What the fake models, and what it does not (the same as the Rust SDK's
``testing::FakeCluster``): objects are JSON, keyed by group, kind, namespace
and name. Writes assign ``uid``, ``resourceVersion``, ``creationTimestamp``
and ``generation`` (bumped when anything outside ``metadata`` and ``status``
changes); a write that changes nothing is a no-op. Every kind behaves as if
it had a status subresource. A ``resourceVersion`` in a replace or patch body
must match (else ``Conflict``). Merge and JSON patches follow RFC 7386 and
RFC 6902 (a failed ``test`` is ``Invalid``). Deleting an object with
finalizers sets its ``deletionTimestamp``; it goes away when the last
finalizer is removed, and then objects whose ownerReferences name its uid are
deleted too. Label selectors support ``k=v``, ``k==v``, ``k!=v``, ``k`` and
``!k``. Server-side apply is "create, or merge the applied object into the
stored one": no field ownership, no apply conflicts. The permission check
derives plurals from kinds the way Kubernetes does by default.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Optional

from . import _host, admission
from .action import Action
from .conditions import now
from .errors import AlreadyExists, ApiError, Conflict, Forbidden, Invalid, NotFound
from .metadata import Gvk, ObjectKey
from .reconciler import Reconciler, metadata_of, run


@dataclass
class Call:
    """One call the SDK made through the host's ``kube`` interface."""

    #: get, list, create, replace, patch, replace-status, patch-status,
    #: delete or record-event.
    verb: str
    kind: Gvk
    namespace: Optional[str]
    #: "" for list and create.
    name: str
    #: What was sent: the object, the patch, the label selector of a list (a
    #: string or None), or for an event {type, reason, action, note}.
    body: Any
    #: For patches: "merge", "json", or "apply <field manager> force=<bool>".
    patch: str = ""


@dataclass
class LogLine:
    level: str
    message: str
    fields: list = field(default_factory=list)


def plural(kind: str) -> str:
    """Kubernetes' default plural of a kind."""
    lower = kind.lower()
    if lower.endswith("y") and not lower[:-1].endswith(("a", "e", "i", "o", "u")):
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "z", "ch", "sh")):
        return lower + "es"
    return lower + "s"


def _same(a: Any, b: Any) -> bool:
    """JSON equality (Python's == has True == 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


class FakeCluster:
    """The in-memory API server of the tests; see the module docs. Creating
    one installs it (replacing any previous one); :meth:`close` (or leaving a
    ``with`` block) uninstalls it."""

    def __init__(self) -> None:
        self.objects: dict[tuple, dict] = {}
        self._revision = 0
        self._calls: list[Call] = []
        self._faults: list[tuple[str, ApiError]] = []
        self._permissions: Optional[list] = None
        self._used: set[tuple[str, str, str]] = set()
        self._attempt = 0
        self._settings = "{}"
        self._cancelled = False
        self._deadline_ms = 10_000
        #: Every log line, in order.
        self.logs: list[LogLine] = []
        #: The lowest level ``log.enabled`` reports as kept (as the host's
        #: log filter would).
        self.log_level = "trace"
        self._secrets: dict[str, tuple[str, bool]] = {}
        self._http_answers: list = []
        #: Every outbound HTTP request the reconciler made, as written
        #: (``${secret:NAME}`` placeholders included).
        self.http_requests: list = []
        # During a review: the export under review, whose writes are refused.
        self._reviewing: Optional[str] = None
        _host.install(self)

    def close(self) -> None:
        if _host.installed() is self:
            _host.install(None)

    def __enter__(self) -> "FakeCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- driving -----------------------------------------------------------

    def reconcile(self, reconciler: Reconciler, key: ObjectKey) -> Action:
        """Runs ``reconciler.reconcile(key)`` as the host would, with every
        call checked against its metadata's permissions. Returns the action
        or raises the :class:`ReconcileError` the host would get (an
        escaping :class:`ApiError` converted by the transient/permanent
        rule); any other exception propagates as it is, with its traceback."""
        self._permissions = list(metadata_of(reconciler).permissions)
        try:
            return run(reconciler, key, contain_unexpected=False)
        finally:
            self._permissions = None

    # --- admission reviews ----------------------------------------------------

    def _review(self, export: str, run_review, operation: str, kind, obj, old) -> "admission.Verdict":
        any_obj = obj if obj is not None else old
        meta = (any_obj or {}).get("metadata") or {}
        request = json.dumps(
            {
                "uid": "00000000-0000-0000-0000-000000000000",
                "kind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
                "resource": {"group": kind.group, "version": kind.version, "resource": kind.plural},
                "name": meta.get("name", ""),
                "namespace": meta.get("namespace"),
                "operation": operation,
                "userInfo": {"username": "tester", "groups": ["system:authenticated"]},
                "object": obj,
                "oldObject": old,
                "dryRun": False,
            }
        )
        self._reviewing = export
        try:
            return run_review(request)
        finally:
            self._reviewing = None

    @staticmethod
    def _result(verdict: "admission.Verdict") -> list[str]:
        if not verdict.allowed:
            raise admission.Denied(verdict.message, code=verdict.code, causes=verdict.causes)
        return verdict.warnings

    def validate_create(self, validator: "admission.Validator", obj: dict) -> list[str]:
        """Runs ``validator`` on a CREATE of ``obj`` as the host would (reads
        from this cluster, writes refused): its warnings, or the
        :class:`~wasmctrl_sdk.admission.Denied` it answered."""
        v = self._review("validate", lambda r: admission.validate(validator, r), "CREATE", validator.kind, obj, None)
        return self._result(v)

    def validate_update(self, validator: "admission.Validator", old: dict, new: dict) -> list[str]:
        v = self._review("validate", lambda r: admission.validate(validator, r), "UPDATE", validator.kind, new, old)
        return self._result(v)

    def validate_delete(self, validator: "admission.Validator", obj: dict) -> list[str]:
        v = self._review("validate", lambda r: admission.validate(validator, r), "DELETE", validator.kind, None, obj)
        return self._result(v)

    def default_object(self, defaulter: "admission.Defaulter", obj: dict) -> dict:
        """Runs ``defaulter`` on a CREATE of ``obj``: the object as it would be
        admitted (``obj`` itself is left as it was)."""
        v = self._review(
            "mutate", lambda r: admission.mutate(defaulter, r), "CREATE", defaulter.kind, copy.deepcopy(obj), None
        )
        self._result(v)
        return json.loads(v.patched) if v.patched is not None else copy.deepcopy(obj)

    def set_attempt(self, attempt: int) -> None:
        """The value ``Context.attempt`` returns."""
        self._attempt = attempt

    def set_settings(self, settings: Any) -> None:
        """The settings ``Context.settings()`` returns (serialized to JSON)."""
        self._settings = json.dumps(settings)

    def answer_http(self, method: str, url: str, status: int, body: bytes = b"", headers=None) -> None:
        """Answers the next outbound ``method url`` request with ``status``
        and ``body``, once; a request without a canned answer fails as one
        the host refused."""
        from .http import Response

        self._http_answers.append((method, url, Response(status, list(headers or []), body)))

    def http_send(self, request):
        from .http import HttpError

        self.http_requests.append(request)
        for i, (method, url, answer) in enumerate(self._http_answers):
            if method == request.method and url == request.url:
                del self._http_answers[i]
                return answer
        raise HttpError(
            f"HTTP request failed: no canned answer for {request.method} {request.url} "
            "(FakeCluster.answer_http); the host would refuse what the grant does not allow"
        )

    def set_secret(self, name: str, value: str, reveal: bool = False) -> None:
        """Gives the plugin secret ``name``: ``secrets.reveal`` answers
        ``value`` where ``reveal`` is true and refuses as the host does
        otherwise."""
        self._secrets[name] = (value, reveal)

    def reveal(self, name: str) -> str:
        if name not in self._secrets:
            raise NotFound(f"no secret named {name!r} (the fake holds only those set with set_secret)")
        value, revealed = self._secrets[name]
        if not revealed:
            raise Forbidden(
                f"secret {name!r} is not revealed to the plugin: its secrets entry does not say reveal: true"
            )
        return value

    def set_cancelled(self, cancelled: bool) -> None:
        self._cancelled = cancelled

    def set_deadline_remaining(self, remaining: timedelta) -> None:
        self._deadline_ms = max(0, remaining // timedelta(milliseconds=1))

    def fail_next(self, verb: str, error: ApiError) -> None:
        """Makes the next call with ``verb`` fail with ``error`` (once)."""
        self._faults.append((verb, error))

    # --- looking -----------------------------------------------------------

    def calls(self) -> list[Call]:
        """Every call made since the cluster was created or :meth:`clear_calls`."""
        return list(self._calls)

    def clear_calls(self) -> None:
        self._calls.clear()

    def events(self) -> list[Call]:
        """The events recorded, as :class:`Call`s with verb record-event."""
        return [c for c in self._calls if c.verb == "record-event"]

    def permissions_used(self) -> list[tuple[str, str, str]]:
        """Each (verb, group, resource) the calls made inside
        :meth:`reconcile` so far needed permission for (status writes name
        ``<plural>/status``; events are create on events.k8s.io/events)."""
        return sorted(self._used)

    def unused_permissions(self, reconciler: Reconciler) -> list[tuple[str, str, str]]:
        """The permissions ``reconciler.metadata()`` declares that no
        reconcile so far needed, as (verb, group, resource); list and watch
        are left out (the host's informers use them). After a test that walks
        every path, an empty result means the metadata asks for exactly what
        the plugin uses."""
        unused = []
        for p in metadata_of(reconciler).permissions:
            for resource in p.resources:
                for verb in p.verbs:
                    need = (verb, p.group, resource)
                    if verb not in ("list", "watch") and need not in self._used:
                        unused.append(need)
        return unused

    # --- the backend the SDK calls -----------------------------------------

    def deadline_remaining_ms(self) -> int:
        return self._deadline_ms

    def cancelled(self) -> bool:
        return self._cancelled

    def attempt(self) -> int:
        return self._attempt

    def settings(self) -> str:
        return self._settings

    def log(self, level: str, message: str, fields: list) -> None:
        self.logs.append(LogLine(level, message, list(fields)))

    def log_enabled(self, level: str) -> bool:
        order = ("trace", "debug", "info", "warn", "error")
        return order.index(level) >= order.index(self.log_level)

    def get(self, kind, namespace, name):
        self._admit(Call("get", kind, namespace, name, None))
        return json.dumps(self.objects[self._existing(kind, namespace, name)])

    def list(self, kind, namespace, label_selector):
        self._admit(Call("list", kind, namespace, "", label_selector))
        items = []
        for (group, k, ns, _), obj in sorted(self.objects.items(), key=lambda kv: _sort_key(kv[0])):
            if group != kind.group or k != kind.kind or (namespace is not None and ns != namespace):
                continue
            if label_selector is None or _matches_selector(obj, label_selector):
                items.append(json.dumps(obj))
        return items

    def create(self, kind, namespace, body):
        obj = _parse(body)
        self._admit(Call("create", kind, namespace, "", obj))
        name = (obj.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name:
            raise Invalid("metadata.name is required")
        return json.dumps(self._create(_key(kind, namespace, name), obj))

    def replace(self, kind, namespace, name, body):
        obj = _parse(body)
        self._admit(Call("replace", kind, namespace, name, obj))
        return json.dumps(self._update(self._existing(kind, namespace, name), obj, status_only=False))

    def replace_status(self, kind, namespace, name, body):
        obj = _parse(body)
        self._admit(Call("replace-status", kind, namespace, name, obj))
        return json.dumps(self._update(self._existing(kind, namespace, name), obj, status_only=True))

    def patch(self, kind, namespace, name, patch):
        return self._patch("patch", kind, namespace, name, patch)

    def patch_status(self, kind, namespace, name, patch):
        return self._patch("patch-status", kind, namespace, name, patch)

    def delete(self, kind, namespace, name):
        self._admit(Call("delete", kind, namespace, name, None))
        self._delete(self._existing(kind, namespace, name))

    def record_event(self, event):
        body = {"type": event.type, "reason": event.reason, "action": event.action, "note": event.note}
        self._admit(Call("record-event", event.regarding_kind, event.regarding_namespace, event.regarding_name, body))

    # --- the model -----------------------------------------------------------

    def _admit(self, call: Call) -> None:
        """Records the call, then applies an injected fault or the permission check."""
        denied = None
        if self._permissions is not None:
            verb, group, resource = _needed(call)
            self._used.add((verb, group, resource))
            if not any(
                p.group == group
                and any(r in (resource, "*") for r in p.resources)
                and any(v in (verb, "*") for v in p.verbs)
                for p in self._permissions
            ):
                denied = Forbidden(
                    f"{verb} on {group or 'core'}/{resource} is not in the plugin's permissions"
                )
        if denied is None and self._reviewing is not None and call.verb not in ("get", "list"):
            denied = Forbidden(
                f"{call.verb} {call.kind.kind}: the host API is read-only during an admission review "
                f"({self._reviewing}); write from `reconcile` instead"
            )
        self._calls.append(copy.deepcopy(call))
        for i, (verb, error) in enumerate(self._faults):
            if verb == call.verb:
                del self._faults[i]
                raise error
        if denied is not None:
            raise denied

    def _existing(self, kind: Gvk, namespace, name) -> tuple:
        k = _key(kind, namespace, name)
        if k not in self.objects:
            raise _not_found(kind, namespace, name)
        return k

    def _next_revision(self) -> str:
        self._revision += 1
        return str(self._revision)

    def _create(self, key: tuple, obj: dict) -> dict:
        if key in self.objects:
            raise AlreadyExists(f"{key[1]} {key[3]} already exists")
        revision = self._next_revision()
        obj = copy.deepcopy(obj)
        meta = _meta(obj)
        meta["name"] = key[3]
        if key[2] is not None:
            meta["namespace"] = key[2]
        meta["uid"] = f"uid-{revision}"
        meta["resourceVersion"] = revision
        meta["generation"] = 1
        meta["creationTimestamp"] = now()
        meta.pop("deletionTimestamp", None)
        obj.pop("status", None)
        self.objects[key] = obj
        return copy.deepcopy(obj)

    def _update(self, key: tuple, new: dict, status_only: bool) -> dict:
        old = self.objects[key]
        old_meta = old.get("metadata") or {}
        rv = (new.get("metadata") or {}).get("resourceVersion") if isinstance(new.get("metadata"), dict) else None
        if rv is not None and rv != old_meta.get("resourceVersion"):
            raise Conflict(f"the object has been modified (resourceVersion {json.dumps(rv)} is stale)")
        if status_only:
            status = new.get("status")
            new = copy.deepcopy(old)
            _set_field(new, "status", status)
        else:
            new = copy.deepcopy(new)
            _set_field(new, "status", copy.deepcopy(old.get("status")))
        meta = _meta(new)
        for system in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "generation", "resourceVersion"):
            if system in old_meta:
                meta[system] = old_meta[system]
            else:
                meta.pop(system, None)
        if _same(new, old):
            return copy.deepcopy(old)
        if not _same(_without(new, "metadata", "status"), _without(old, "metadata", "status")):
            meta["generation"] = int(old_meta.get("generation") or 0) + 1
        meta["resourceVersion"] = self._next_revision()
        self.objects[key] = new
        if _is_deleting(new) and not _finalizers(new):
            self._remove(key)
        return copy.deepcopy(new)

    def _delete(self, key: tuple) -> None:
        obj = self.objects[key]
        if not _finalizers(obj):
            self._remove(key)
        elif not _is_deleting(obj):
            new = copy.deepcopy(obj)
            _meta(new)["deletionTimestamp"] = now()
            _meta(new)["resourceVersion"] = self._next_revision()
            self.objects[key] = new

    def _remove(self, key: tuple) -> None:
        """Removes the object and garbage-collects its dependents."""
        gone = self.objects.pop(key, None)
        if gone is None:
            return
        uid = (gone.get("metadata") or {}).get("uid")
        dependents = [
            k
            for k, o in self.objects.items()
            if any(r.get("uid") == uid for r in ((o.get("metadata") or {}).get("ownerReferences") or []))
        ]
        for dependent in dependents:
            if dependent in self.objects:
                self._delete(dependent)

    def _patch(self, verb, kind, namespace, name, patch):
        body = _parse(patch.body)
        how = {"merge": "merge", "json": "json"}.get(patch.type) or f"apply {patch.field_manager} force={str(patch.force).lower()}"
        self._admit(Call(verb, kind, namespace, name, body, how))
        status_only = verb == "patch-status"
        key = _key(kind, namespace, name)
        current = self.objects.get(key)
        if current is None:
            if patch.type == "apply" and not status_only:
                return json.dumps(self._create(key, body))
            raise _not_found(kind, namespace, name)
        if patch.type == "json":
            nxt = _json_patch(current, body)
        else:
            nxt = copy.deepcopy(current)
            nxt = _merge_patch(nxt, body)
        return json.dumps(self._update(key, nxt, status_only))


def _sort_key(key: tuple) -> tuple:
    group, kind, ns, name = key
    return (group, kind, ns is not None, ns or "", name)


def _key(kind: Gvk, namespace: Optional[str], name: str) -> tuple:
    return (kind.group, kind.kind, namespace, name)


def _not_found(kind: Gvk, namespace, name) -> NotFound:
    at = f"{namespace}/" if namespace is not None else ""
    return NotFound(f"{kind.kind} {at}{name} not found")


def _needed(call: Call) -> tuple[str, str, str]:
    """The verb, group and resource a call needs permission for."""
    resource = plural(call.kind.kind)
    if call.verb == "record-event":
        return ("create", "events.k8s.io", "events")
    if call.verb == "replace-status":
        return ("update", call.kind.group, f"{resource}/status")
    if call.verb == "patch-status":
        return ("patch", call.kind.group, f"{resource}/status")
    if call.verb == "replace":
        return ("update", call.kind.group, resource)
    return (call.verb, call.kind.group, resource)


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise Invalid(f"invalid JSON: {e}") from None


def _meta(obj: dict) -> dict:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    return meta


def _set_field(obj: dict, name: str, value: Any) -> None:
    if value is None:
        obj.pop(name, None)
    else:
        obj[name] = value


def _without(obj: dict, *fields: str) -> dict:
    return {k: v for k, v in obj.items() if k not in fields}


def _finalizers(obj: dict) -> list:
    return list((obj.get("metadata") or {}).get("finalizers") or [])


def _is_deleting(obj: dict) -> bool:
    return (obj.get("metadata") or {}).get("deletionTimestamp") is not None


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = _merge_patch(target.get(k), v)
    return target


def _pointer(path: str) -> Optional[list[str]]:
    if path == "":
        return []
    if not path.startswith("/"):
        return None
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


_MISSING = object()


def _resolve(doc: Any, tokens: list[str]) -> Any:
    for t in tokens:
        if isinstance(doc, dict):
            if t not in doc:
                return _MISSING
            doc = doc[t]
        elif isinstance(doc, list):
            if not t.isdigit() or int(t) >= len(doc):
                return _MISSING
            doc = doc[int(t)]
        else:
            return _MISSING
    return doc


def _json_patch(target: dict, ops: Any) -> dict:
    """RFC 6902, atomically."""

    def invalid(i: int, message: str) -> Invalid:
        return Invalid(f"json patch operation {i}: {message}")

    if not isinstance(ops, list):
        raise Invalid("a json patch is an array of operations")
    doc = copy.deepcopy(target)
    for i, op in enumerate(ops):
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise invalid(i, "no path")
        path = op["path"]
        tokens = _pointer(path)
        if tokens is None:
            raise invalid(i, "bad path")
        kind = op.get("op")
        if kind == "test":
            found = _resolve(doc, tokens)
            parent_exists = len(tokens) <= 1 or _resolve(doc, tokens[:-1]) is not _MISSING
            value = op.get("value")
            ok = _same(found, value) if found is not _MISSING else (value is None and parent_exists)
            if not ok:
                raise invalid(i, f"test failed at {path}")
        elif kind in ("add", "replace"):
            if not tokens:
                raise invalid(i, "root")
            parent = _resolve(doc, tokens[:-1])
            if parent is _MISSING:
                raise invalid(i, "no parent")
            if "value" not in op:
                raise invalid(i, "no value")
            last, value, replace = tokens[-1], copy.deepcopy(op["value"]), kind == "replace"
            if isinstance(parent, dict):
                if replace and last not in parent:
                    raise invalid(i, "replace of a missing key")
                parent[last] = value
            elif isinstance(parent, list):
                if last == "-" and not replace:
                    index = len(parent)
                elif last.isdigit():
                    index = int(last)
                else:
                    raise invalid(i, "bad index")
                if replace and index < len(parent):
                    parent[index] = value
                elif not replace and index <= len(parent):
                    parent.insert(index, value)
                else:
                    raise invalid(i, "index out of range")
            else:
                raise invalid(i, "parent is not a container")
        elif kind == "remove":
            if not tokens:
                raise invalid(i, "root")
            parent = _resolve(doc, tokens[:-1])
            last = tokens[-1]
            if isinstance(parent, dict) and last in parent:
                del parent[last]
            elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
                del parent[int(last)]
            else:
                raise invalid(i, f"nothing to remove at {path}")
        else:
            raise invalid(i, f"unsupported op {kind!r}")
    return doc


def _matches_selector(obj: dict, selector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}

    def label(k: str) -> Optional[str]:
        return labels.get(k.strip())

    for term in (t.strip() for t in selector.split(",")):
        if not term:
            continue
        if "!=" in term:
            k, v = term.split("!=", 1)
            ok = label(k) != v.strip()
        elif "==" in term or "=" in term:
            k, v = term.split("==", 1) if "==" in term else term.split("=", 1)
            ok = label(k) == v.strip()
        elif term.startswith("!"):
            ok = label(term[1:]) is None
        elif " " in term or "(" in term:
            raise Invalid(f"the fake API server does not support the selector term {term!r}")
        else:
            ok = label(term) is not None
        if not ok:
            return False
    return True
