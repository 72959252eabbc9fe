/**
 * The {{plugin}} plugin: reconciles {{Kind}} ({{group}}/{{version}}).
 *
 * Each {{Kind}} gets the finalizer `{{finalizer}}` and a `Ready` condition
 * whose `observedGeneration` says which spec it describes.{{owned_doc}}
 * The CRD (`crd.yaml`) was generated from `{{Kind}}Spec` and
 * `{{Kind}}Status`: change them together.
 */
import {
  Action,
  Api,
  type Condition,
  conditions,
  type Context,{{ts_owner_import}}
  finalizer,
  kind,{{kinds_import}}
  type KubeObject,
  log,
  Metadata,
  nameOf,
  type ObjectKey,
  PermanentError,
  type Reconciler,
} from "@wasmctrl/sdk";

/** The field manager of every write, and the plugin's name. */
export const MANAGER = "{{plugin}}";
export const VERSION = "0.1.0";
export const FINALIZER = "{{finalizer}}";

export const {{Kind}} = kind("{{group}}", "{{version}}", "{{Kind}}", "{{plural}}");

export interface {{Kind}}Spec {
{{spec_fields}}}

export interface {{Kind}}Status {
  observedGeneration?: number;
  conditions?: Condition[];
}

export type {{Kind}}Object = KubeObject<{{Kind}}Spec, {{Kind}}Status>;

export class {{Reconciler}} implements Reconciler {
  /**
   * Every kind it reconciles or owns and every access it makes: the host
   * config (`wasmctrl.yaml`) grants exactly this.
   */
  metadata(): Metadata {
    return new Metadata(MANAGER, VERSION, {{Kind}})
{{metadata}};
  }

  reconcile(key: ObjectKey, _ctx: Context): Action {
    const namespace = key.requireNamespace();
    const api = Api.namespaced<{{Kind}}Object>({{Kind}}, namespace);
    const object = api.getOpt(key.name);
    // Gone: what it owned is garbage-collected.
    if (object === undefined) return Action.done();
    return finalizer(api, FINALIZER, object, (event) => {
      if (event.type === "apply") return apply(api, namespace, event.object);
      // Release here what the cluster does not garbage-collect.
      log.info(`{{Kind}} ${nameOf(event.object)} is being deleted`);
      return Action.done();
    });
  }
}

/**
 * The spec, checked: a spec the plugin cannot read is a permanent error,
 * since retrying would not fix it.
 */
function specOf(object: {{Kind}}Object): {{Kind}}Spec {
  const spec = object.spec;
  if (spec == null) throw new PermanentError(`{{Kind}} ${nameOf(object)} has no spec`);
{{spec_checks}}  return spec;
}

/** Brings what the {{Kind}} asks for about, then reports it in Ready. */
function apply(api: Api<{{Kind}}Object>, namespace: string, object: {{Kind}}Object): Action {
  const spec = specOf(object);
{{apply_owned}}  const generation = object.metadata?.generation;
  const old = object.status ?? {};
  const status: {{Kind}}Status = {
    conditions: (old.conditions ?? []).map((c) => ({ ...c })),
  };
  if (generation !== undefined) status.observedGeneration = generation;
  const ready = conditions.newCondition("Ready", true, "Reconciled", spec.message, generation);
  const changed = conditions.set(status.conditions!, ready);
  // A status that would not change is not written: no write, no event, no
  // reconcile of our own making.
  if (changed || old.observedGeneration !== generation) {
    api.applyStatus(nameOf(object), status, MANAGER, true);
  }
  return Action.done();
}
