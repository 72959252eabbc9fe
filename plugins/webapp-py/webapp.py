"""The example operator in Python: a ``WebApp`` (demo.wasmctrl.dev/v1alpha1)
becomes a Deployment and a Service of the same name, owned by it — the same
job, metadata and behaviour as the Rust ``plugins/webapp``.

- Both are server-side applied on every reconcile, so replicas and image
  follow the spec, and a deleted or hand-edited Deployment is put back (its
  events reach the WebApp's key through the ownerReference).
- ``status.conditions[Ready]`` is False (``Progressing``) until the
  Deployment's ``readyReplicas`` equals ``spec.replicas``, then True
  (``Available``); until then the key is polled every 5 s.
- While ready, the WebApp's service URL is listed in the ConfigMap
  ``webapp-registry`` of its namespace (key: the WebApp's name). The
  finalizer ``demo.wasmctrl.dev/cleanup`` removes the entry before the
  WebApp goes away.
- Admission webhooks refuse WebApps the operator cannot run (``replicas``
  outside 0–50, an image with neither a tag nor a digest) and default the
  rest: ``replicas`` 1, ``port`` 80, and the label
  ``app.kubernetes.io/managed-by: wasmctrl``.
"""

from typing import Optional

from wasmctrl_sdk.admission import Defaulter, FieldErrors, Validator
from wasmctrl_sdk import (
    Action,
    AlreadyExists,
    ApiError,
    Api,
    Apply,
    Cleanup,
    EventType,
    Kind,
    Metadata,
    NotFound,
    ObjectKey,
    Patch,
    PermanentError,
    Reconciler,
    Recorder,
    conditions,
    export,
    finalizer,
    kinds,
    log,
    objects,
)

#: The field manager of every write, and the plugin's name.
MANAGER = "webapp"
VERSION = "0.1.0"
FINALIZER = "demo.wasmctrl.dev/cleanup"
REGISTRY = "webapp-registry"
#: How often a WebApp that is not ready yet is looked at again (seconds).
POLL = 5

WEBAPP = Kind("demo.wasmctrl.dev", "v1alpha1", "WebApp", "webapps")


def spec_of(app: dict) -> tuple[str, int, int]:
    """(image, replicas, port) with the CRD's defaults; a spec the plugin
    cannot read is permanent, as a WebApp that does not deserialize is for
    the Rust plugin."""
    spec = app.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("image"), str):
        raise PermanentError(f"the WebApp {objects.name(app)} has no spec.image")
    replicas, port = spec.get("replicas", 1), spec.get("port", 80)
    for field, value in (("replicas", replicas), ("port", port)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise PermanentError(f"the WebApp {objects.name(app)}: spec.{field} is not an integer")
    return spec["image"], replicas, port


class WebAppReconciler(Reconciler):
    def metadata(self) -> Metadata:
        return (
            Metadata(MANAGER, VERSION, WEBAPP)
            .owns(kinds.DEPLOYMENT)
            .owns(kinds.SERVICE)
            # get: read the WebApp; list/watch: the host's informer; patch:
            # the finalizer. Status writes need patch on webapps/status.
            .permission(WEBAPP.group, ["webapps"], ["get", "list", "watch", "patch"])
            .permission(WEBAPP.group, ["webapps/status"], ["patch"])
            # Owned kinds: informers, and server-side apply (a patch, which
            # also creates).
            .permission("apps", ["deployments"], ["list", "watch", "patch"])
            .permission("", ["services"], ["list", "watch", "patch"])
            .permission("", ["configmaps"], ["get", "create", "patch"])
            .permission("events.k8s.io", ["events"], ["create"])
        )

    def reconcile(self, key: ObjectKey, ctx) -> Action:
        namespace = key.require_namespace()
        apps = Api.namespaced(WEBAPP, namespace)
        app = apps.get_opt(key.name)
        if app is None:
            # Gone: its Deployment and Service are garbage-collected.
            return Action.done()

        def handle(event) -> Action:
            match event:
                case Apply(app):
                    return apply(apps, namespace, app)
                case Cleanup(app):
                    register(namespace, objects.name(app), None)
                    return Action.done()

        return finalizer(apps, FINALIZER, app, handle)


def apply(apps: Api, namespace: str, app: dict) -> Action:
    owner = WEBAPP.controller_owner_ref(app)
    if owner is None:
        raise PermanentError("the WebApp has no uid")
    name = objects.name(app)
    image, desired, port = spec_of(app)
    deployment = Api.namespaced(kinds.DEPLOYMENT, namespace).apply(
        deployment_for(app, owner, image, desired, port), MANAGER, True
    )
    Api.namespaced(kinds.SERVICE, namespace).apply(service_for(app, owner, port), MANAGER, True)

    ready_replicas = (deployment.get("status") or {}).get("readyReplicas") or 0
    ready = ready_replicas == desired
    url = f"http://{name}.{namespace}.svc.cluster.local:{port}"
    register(namespace, name, url if ready else None)

    if ready:
        reason, message = "Available", f"{desired} replicas ready at {url}"
    else:
        reason, message = "Progressing", f"{ready_replicas}/{desired} replicas ready"
    generation = objects.meta(app).get("generation")
    old = typed_status(app.get("status"))
    status = {"conditions": [dict(c) for c in old["conditions"]]}
    if generation is not None:
        status = {"observedGeneration": generation, **status}
    ready_condition = conditions.new("Ready", ready, reason, message, observed_generation=generation)
    conditions.set(status["conditions"], ready_condition)
    if app.get("status") is None or typed_status(app.get("status")) != status:
        apps.apply_status(name, status, MANAGER, True)

    was = (conditions.get(old["conditions"], "Ready") or {}).get("status")
    now = (conditions.get(status["conditions"], "Ready") or {}).get("status")
    if was != now:
        note = f"{ready_replicas}/{desired} replicas ready"
        try:
            Recorder(WEBAPP, app).publish(EventType.NORMAL, reason, "Reconcile", note)
        except ApiError as e:  # events are best-effort
            log.warn(f"could not record an event: {e}")
    return Action.done() if ready else Action.requeue_after(POLL)


def typed_status(status: Optional[dict]) -> dict:
    """The status as the plugin models it (observedGeneration, conditions):
    other fields someone else wrote do not count as a difference."""
    status = status or {}
    typed = {"conditions": list(status.get("conditions") or [])}
    if status.get("observedGeneration") is not None:
        typed = {"observedGeneration": status["observedGeneration"], **typed}
    return typed


def register(namespace: str, name: str, url: Optional[str]) -> None:
    """Makes the ``webapp-registry`` entry for ``name`` be ``url``, or absent."""
    configmaps = Api.namespaced(kinds.CONFIG_MAP, namespace)
    current = configmaps.get_opt(REGISTRY)
    entry = ((current or {}).get("data") or {}).get(name)
    if entry == url:
        return
    if current is None and url is not None:
        try:
            configmaps.create({"metadata": {"name": REGISTRY}, "data": {name: url}})
            return
        except AlreadyExists:
            pass  # created concurrently by another WebApp: patch it below
    # A merge patch touches only this key; None removes it.
    try:
        configmaps.patch(REGISTRY, Patch.merge({"data": {name: url}}))
    except NotFound:
        if url is not None:
            raise


def labels(app: dict) -> dict:
    return {"app.kubernetes.io/instance": objects.name(app), "app.kubernetes.io/name": "webapp"}


def owned_meta(app: dict, owner: dict) -> dict:
    return {
        "name": objects.name(app),
        "labels": {**labels(app), "app.kubernetes.io/managed-by": MANAGER},
        "ownerReferences": [owner],
    }


def deployment_for(app: dict, owner: dict, image: str, replicas: int, port: int) -> dict:
    return {
        "metadata": owned_meta(app, owner),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels(app)},
            "template": {
                "metadata": {"labels": labels(app)},
                "spec": {
                    "containers": [
                        {"name": "web", "image": image, "ports": [{"name": "http", "containerPort": port}]}
                    ]
                },
            },
        },
    }


def service_for(app: dict, owner: dict, port: int) -> dict:
    return {
        "metadata": owned_meta(app, owner),
        "spec": {
            "selector": labels(app),
            "ports": [{"name": "http", "port": port, "targetPort": "http"}],
        },
    }


#: The most replicas a WebApp may ask for.
MAX_REPLICAS = 50
MANAGED_BY = "app.kubernetes.io/managed-by"


def pinned(image: str) -> bool:
    """Whether ``image`` names a tag or a digest. A registry's port
    (``localhost:5000/web``) is not a tag: the tag is after the last ``/``."""
    return "@" in image or ":" in image.rsplit("/", 1)[-1]


class WebAppAdmission(Validator, Defaulter):
    """Refuses WebApps the operator cannot run; labels and defaults the rest."""

    kind = WEBAPP

    def validate_create(self, app, request):
        spec = app.get("spec") or {}
        replicas, image = spec.get("replicas", 1), spec.get("image", "")
        errors = FieldErrors()
        if not isinstance(replicas, int) or not 0 <= replicas <= MAX_REPLICAS:
            errors.invalid("spec.replicas", replicas, f"must be between 0 and {MAX_REPLICAS}")
        if not pinned(image):
            errors.invalid("spec.image", image, "must name a tag (name:tag) or a digest (name@sha256:…)")
        errors.raise_if_any(WEBAPP, app)
        return []

    def default(self, app, request):
        spec = app.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        spec.setdefault("port", 80)
        app.setdefault("metadata", {}).setdefault("labels", {})[MANAGED_BY] = "wasmctrl"


export(WebAppReconciler, validator=WebAppAdmission, defaulter=WebAppAdmission)
