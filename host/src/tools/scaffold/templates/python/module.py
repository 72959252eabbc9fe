"""The {{plugin}} plugin: reconciles {{Kind}} ({{group}}/{{version}}).

Each {{Kind}} gets the finalizer ``{{finalizer}}`` and a ``Ready`` condition
whose ``observedGeneration`` says which spec it describes.{{owned_doc}}
The CRD (``crd.yaml``) was generated from ``{{Kind}}Spec`` and
``{{Kind}}Status``: change them together.
"""

from typing import TypedDict

from wasmctrl_sdk import (
    Action,
    Api,
    Apply,
    Cleanup,
    Kind,
    Metadata,
    ObjectKey,
    PermanentError,
    Reconciler,
    conditions,
    export,
    finalizer,{{kinds_import}}
    log,
    objects,
)

#: The field manager of every write, and the plugin's name.
MANAGER = "{{plugin}}"
VERSION = "0.1.0"
FINALIZER = "{{finalizer}}"

{{KIND}} = Kind("{{group}}", "{{version}}", "{{Kind}}", "{{plural}}")


class {{Kind}}Spec(TypedDict):
{{spec_fields}}

class {{Kind}}Status(TypedDict, total=False):
    observedGeneration: int
    conditions: list[dict]


@export
class {{Reconciler}}(Reconciler):
    def metadata(self) -> Metadata:
        """Every kind it reconciles or owns and every access it makes: the
        host config (``wasmctrl.yaml``) grants exactly this."""
        return (
            Metadata(MANAGER, VERSION, {{KIND}})
{{metadata}}        )

    def reconcile(self, key: ObjectKey, ctx) -> Action:
        namespace = key.require_namespace()
        api = Api.namespaced({{KIND}}, namespace)
        obj = api.get_opt(key.name)
        if obj is None:
            return Action.done()  # gone: what it owned is garbage-collected

        def handle(event) -> Action:
            match event:
                case Apply(obj):
                    return apply(api, namespace, obj)
                case Cleanup(obj):
                    # Release here what the cluster does not garbage-collect.
                    log.info(f"{{Kind}} {objects.name(obj)} is being deleted")
                    return Action.done()

        return finalizer(api, FINALIZER, obj, handle)


def spec_of(obj: dict) -> {{Kind}}Spec:
    """The spec, checked: a spec the plugin cannot read is a permanent
    error, since retrying would not fix it."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise PermanentError(f"{{Kind}} {objects.name(obj)} has no spec")
{{spec_checks}}    return spec  # type: ignore[return-value]


def apply(api: Api, namespace: str, obj: dict) -> Action:
    """Brings what the {{Kind}} asks for about, then reports it in Ready."""
    spec = spec_of(obj)
{{apply_owned}}    generation = objects.meta(obj).get("generation")
    old: {{Kind}}Status = obj.get("status") or {}
    status: {{Kind}}Status = {
        "observedGeneration": generation,
        "conditions": [dict(c) for c in old.get("conditions") or []],
    }
    ready = conditions.new("Ready", True, "Reconciled", spec["message"], observed_generation=generation)
    changed = conditions.set(status["conditions"], ready)
    # A status that would not change is not written: no write, no event,
    # no reconcile of our own making.
    if changed or old.get("observedGeneration") != generation:
        api.apply_status(objects.name(obj), status, MANAGER, True)
    return Action.done()
