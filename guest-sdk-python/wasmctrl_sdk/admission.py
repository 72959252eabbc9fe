"""Admission webhooks: validate and default objects before the API server
stores them, in the spirit of controller-runtime's ``CustomValidator`` and
``CustomDefaulter``.

A plugin subclasses :class:`Validator` and/or :class:`Defaulter` for one
kind and names them in :func:`wasmctrl_sdk.export`::

    class WebAppAdmission(Validator, Defaulter):
        kind = WEBAPP

        def validate_create(self, app, request):
            errors = FieldErrors()
            if not 0 <= app["spec"].get("replicas", 1) <= 50:
                errors.invalid("spec.replicas", app["spec"]["replicas"], "must be between 0 and 50")
            errors.raise_if_any(self.kind, app)
            return []

        def default(self, app, request):
            app["metadata"].setdefault("labels", {})["app.kubernetes.io/managed-by"] = "wasmctrl"

    export(WebAppReconciler, validator=WebAppAdmission, defaulter=WebAppAdmission)

The host serves them as webhooks for the rules of :meth:`Validator.webhook`
and :meth:`Defaulter.webhook`, which must stay within the plugin's
permissions (reviewing an object is reading it). During a review the host
API is read-only. A defaulter changes the object (a ``dict``) in place; the
host computes the patch and refuses a change of the object's name,
namespace, uid, kind or apiVersion.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from .metadata import Kind

OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class Webhook:
    """Which requests a webhook reviews, and how the API server treats it."""

    def __init__(self, kind: Kind, operations=("CREATE", "UPDATE")) -> None:
        self.rules: list[tuple[list[str], str, str, list[str]]] = []
        self.ignore_failures_ = False
        self.timeout_seconds_ = 0
        self.namespace_selector_: Optional[str] = None
        self.object_selector_: Optional[str] = None
        self.rule(kind.group, kind.version, [kind.plural], operations)

    def rule(self, group: str, version: str, resources, operations) -> "Webhook":
        """Also reviews ``operations`` on ``resources`` of ``group``/``version``."""
        for op in operations:
            if op not in OPERATIONS:
                raise ValueError(f"unknown operation {op!r}; one of {', '.join(OPERATIONS)}")
        self.rules.append((list(operations), group, version, list(resources)))
        return self

    def ignore_failures(self) -> "Webhook":
        """failurePolicy ``Ignore``: allow (with a warning) when the plugin
        cannot answer. The default, ``Fail``, denies."""
        self.ignore_failures_ = True
        return self

    def timeout_seconds(self, seconds: int) -> "Webhook":
        """The API server's budget for one review, 1–30 s (default 10)."""
        self.timeout_seconds_ = seconds
        return self

    def namespace_selector(self, selector: str) -> "Webhook":
        self.namespace_selector_ = selector
        return self

    def object_selector(self, selector: str) -> "Webhook":
        self.object_selector_ = selector
        return self


@dataclass
class UserInfo:
    username: str = ""
    groups: list[str] = field(default_factory=list)


@dataclass
class AdmissionRequest:
    """The request under review (AdmissionReview v1's ``request``)."""

    uid: str
    operation: str
    name: str
    namespace: Optional[str]
    sub_resource: Optional[str]
    user: UserInfo
    dry_run: bool
    object: Any
    old_object: Any

    @staticmethod
    def from_json(text: str) -> "AdmissionRequest":
        try:
            r = json.loads(text)
        except ValueError as e:
            raise Denied(f"the admission request is not JSON: {e}", code=400) from None
        operation = r.get("operation", "")
        if operation not in OPERATIONS:
            raise Denied(f"unknown operation {operation!r}", code=400)
        user = r.get("userInfo") or {}
        return AdmissionRequest(
            uid=r.get("uid", ""),
            operation=operation,
            name=r.get("name", ""),
            namespace=r.get("namespace") or None,
            sub_resource=r.get("subResource") or None,
            user=UserInfo(user.get("username", ""), list(user.get("groups") or [])),
            dry_run=bool(r.get("dryRun", False)),
            object=r.get("object"),
            old_object=r.get("oldObject"),
        )


@dataclass
class Cause:
    field: str
    reason: str
    message: str


class Denied(Exception):
    """A denied request: 403 Forbidden unless another code (400–599) is
    given; ``causes`` render as the API server's ``Invalid`` causes."""

    def __init__(self, message: str, code: int = 403, causes: Optional[list[Cause]] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.causes = causes or []


class FieldErrors:
    """Field errors, worded as the API server words its own validation:
    ``WebApp.demo.wasmctrl.dev "web" is invalid: spec.replicas: Invalid
    value: 51: must be between 0 and 50`` (status 422, one cause each)."""

    def __init__(self) -> None:
        self.causes: list[Cause] = []

    def invalid(self, path: str, value: Any, detail: str) -> None:
        self.causes.append(Cause(path, "FieldValueInvalid", f"Invalid value: {json.dumps(value)}: {detail}"))

    def required(self, path: str, detail: str = "") -> None:
        message = f"Required value: {detail}" if detail else "Required value"
        self.causes.append(Cause(path, "FieldValueRequired", message))

    def forbidden(self, path: str, detail: str) -> None:
        self.causes.append(Cause(path, "FieldValueForbidden", f"Forbidden: {detail}"))

    def not_supported(self, path: str, value: str, supported) -> None:
        values = ", ".join(json.dumps(s) for s in supported)
        self.causes.append(
            Cause(path, "FieldValueNotSupported", f"Unsupported value: {json.dumps(value)}: supported values: {values}")
        )

    def __bool__(self) -> bool:
        return bool(self.causes)

    def raise_if_any(self, kind: Kind, obj: dict) -> None:
        """Raises the :class:`Denied` of ``obj`` when there are errors."""
        if not self.causes:
            return
        qualified = f"{kind.kind}.{kind.group}" if kind.group else kind.kind
        errors = [f"{c.field}: {c.message}" for c in self.causes]
        shown = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        name = ((obj or {}).get("metadata") or {}).get("name", "")
        raise Denied(f"{qualified} {json.dumps(name)} is invalid: {shown}", code=422, causes=list(self.causes))


class Validator:
    """Validates objects of ``kind`` (a validating webhook)."""

    kind: Kind

    def webhook(self) -> Webhook:
        """Which requests to review; default: creates and updates of ``kind``."""
        return Webhook(self.kind)

    def validate_create(self, obj: dict, request: AdmissionRequest) -> list[str]:
        """Warnings, or raise :class:`Denied`."""
        raise NotImplementedError

    def validate_update(self, old: dict, new: dict, request: AdmissionRequest) -> list[str]:
        return self.validate_create(new, request)

    def validate_delete(self, obj: dict, request: AdmissionRequest) -> list[str]:
        return []


class Defaulter:
    """Sets defaults on objects of ``kind`` (a mutating webhook)."""

    kind: Kind

    def webhook(self) -> Webhook:
        """Which requests to review; default: creates and updates of ``kind``."""
        return Webhook(self.kind)

    def default(self, obj: dict, request: AdmissionRequest) -> None:
        """Changes ``obj`` in place, or raise :class:`Denied`."""
        raise NotImplementedError


@dataclass
class Verdict:
    """What a review answers (the WIT ``admission-response``)."""

    allowed: bool
    code: int = 0
    message: str = ""
    causes: list[Cause] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    patched: Optional[str] = None


def _denied(d: Denied) -> Verdict:
    return Verdict(allowed=False, code=d.code, message=d.message, causes=d.causes)


def validate(validator: Validator, request_json: str) -> Verdict:
    """What ``validator`` answers to one request."""
    try:
        request = AdmissionRequest.from_json(request_json)
        if request.operation == "UPDATE":
            warnings = validator.validate_update(request.old_object, request.object, request)
        elif request.operation == "DELETE":
            warnings = validator.validate_delete(request.old_object, request)
        else:
            warnings = validator.validate_create(request.object, request)
        return Verdict(allowed=True, warnings=list(warnings or []))
    except Denied as d:
        return _denied(d)


def mutate(defaulter: Defaulter, request_json: str) -> Verdict:
    """What ``defaulter`` answers to one request: the object as it should
    be admitted, where the defaulter changed it."""
    try:
        request = AdmissionRequest.from_json(request_json)
        if not isinstance(request.object, dict):
            return Verdict(allowed=True)
        before = json.dumps(request.object, sort_keys=True)
        defaulter.default(request.object, request)
        if json.dumps(request.object, sort_keys=True) == before:
            return Verdict(allowed=True)
        return Verdict(allowed=True, patched=json.dumps(request.object))
    except Denied as d:
        return _denied(d)
