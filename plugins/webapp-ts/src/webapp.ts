/**
 * The example operator in TypeScript: a `WebApp` (demo.wasmctrl.dev/v1alpha1)
 * becomes a Deployment and a Service of the same name, owned by it — the
 * same job, metadata and behaviour as the Rust `plugins/webapp`.
 *
 * - Both are server-side applied on every reconcile, so replicas and image
 *   follow the spec, and a deleted or hand-edited Deployment is put back
 *   (its events reach the WebApp's key through the ownerReference).
 * - `status.conditions[Ready]` is False (`Progressing`) until the
 *   Deployment's `readyReplicas` equals `spec.replicas`, then True
 *   (`Available`); until then the key is polled every 5 s.
 * - While ready, the WebApp's service URL is listed in the ConfigMap
 *   `webapp-registry` of its namespace (key: the WebApp's name). The
 *   finalizer `demo.wasmctrl.dev/cleanup` removes the entry before the
 *   WebApp goes away.
 * - Admission webhooks refuse WebApps the operator cannot run (`replicas`
 *   outside 0–50, an image with neither a tag nor a digest) and default the
 *   rest: `replicas` 1, `port` 80, and the label
 *   `app.kubernetes.io/managed-by: wasmctrl`.
 */
import {
  Action,
  admission,
  AlreadyExists,
  Api,
  ApiError,
  type Condition,
  conditions,
  type Context,
  controllerOwnerRef,
  finalizer,
  kind,
  kinds,
  type KubeObject,
  log,
  Metadata,
  nameOf,
  NotFound,
  type ObjectKey,
  type OwnerReference,
  Patch,
  PermanentError,
  type Reconciler,
  Recorder,
} from "@wasmctrl/sdk";

/** The field manager of every write, and the plugin's name. */
export const MANAGER = "webapp";
export const VERSION = "0.1.0";
export const FINALIZER = "demo.wasmctrl.dev/cleanup";
export const REGISTRY = "webapp-registry";
/** How often a WebApp that is not ready yet is looked at again (ms). */
export const POLL_MS = 5000;

export const WebApp = kind("demo.wasmctrl.dev", "v1alpha1", "WebApp", "webapps");

export interface WebAppSpec {
  /** The container image to run. */
  image: string;
  /** Default 1. */
  replicas?: number;
  /** The port the container listens on, and the Service's port. Default 80. */
  port?: number;
}

export interface WebAppStatus {
  observedGeneration?: number;
  conditions?: Condition[];
}

export type WebAppObject = KubeObject<WebAppSpec, WebAppStatus>;

/**
 * (image, replicas, port) with the CRD's defaults; a spec the plugin cannot
 * read is permanent, as a WebApp that does not deserialize is for the Rust
 * plugin.
 */
function specOf(app: WebAppObject): { image: string; replicas: number; port: number } {
  const spec = app.spec;
  if (!spec || typeof spec.image !== "string") throw new PermanentError(`the WebApp ${nameOf(app)} has no spec.image`);
  const replicas = spec.replicas ?? 1;
  const port = spec.port ?? 80;
  for (const [field, value] of [["replicas", replicas], ["port", port]] as const) {
    if (!Number.isInteger(value)) throw new PermanentError(`the WebApp ${nameOf(app)}: spec.${field} is not an integer`);
  }
  return { image: spec.image, replicas, port };
}

export class WebAppReconciler implements Reconciler {
  metadata(): Metadata {
    return (
      new Metadata(MANAGER, VERSION, WebApp)
        .owns(kinds.Deployment)
        .owns(kinds.Service)
        // get: read the WebApp; list/watch: the host's informer; patch: the
        // finalizer. Status writes need patch on webapps/status.
        .permission(WebApp.group, ["webapps"], ["get", "list", "watch", "patch"])
        .permission(WebApp.group, ["webapps/status"], ["patch"])
        // Owned kinds: informers, and server-side apply (a patch, which also
        // creates).
        .permission("apps", ["deployments"], ["list", "watch", "patch"])
        .permission("", ["services"], ["list", "watch", "patch"])
        .permission("", ["configmaps"], ["get", "create", "patch"])
        .permission("events.k8s.io", ["events"], ["create"])
    );
  }

  reconcile(key: ObjectKey, _ctx: Context): Action {
    const namespace = key.requireNamespace();
    const apps = Api.namespaced<WebAppObject>(WebApp, namespace);
    const app = apps.getOpt(key.name);
    if (app === undefined) {
      // Gone: its Deployment and Service are garbage-collected.
      return Action.done();
    }
    return finalizer(apps, FINALIZER, app, (event) => {
      if (event.type === "apply") return apply(apps, namespace, event.object);
      register(namespace, nameOf(event.object), undefined);
      return Action.done();
    });
  }
}

function apply(apps: Api<WebAppObject>, namespace: string, app: WebAppObject): Action {
  const owner = controllerOwnerRef(WebApp, app);
  if (owner === undefined) throw new PermanentError("the WebApp has no uid");
  const name = nameOf(app);
  const { image, replicas: desired, port } = specOf(app);
  const deployment = Api.namespaced(kinds.Deployment, namespace).apply(
    deploymentFor(app, owner, image, desired, port),
    MANAGER,
    true,
  );
  Api.namespaced(kinds.Service, namespace).apply(serviceFor(app, owner, port), MANAGER, true);

  const readyReplicas = (deployment.status as { readyReplicas?: number } | undefined)?.readyReplicas ?? 0;
  const ready = readyReplicas === desired;
  const url = `http://${name}.${namespace}.svc.cluster.local:${port}`;
  register(namespace, name, ready ? url : undefined);

  const [reason, message] = ready
    ? ["Available", `${desired} replicas ready at ${url}`]
    : ["Progressing", `${readyReplicas}/${desired} replicas ready`];
  const generation = app.metadata?.generation;
  const old = typedStatus(app.status);
  const status: WebAppStatus = {};
  if (generation !== undefined) status.observedGeneration = generation;
  status.conditions = old.conditions!.map((c) => ({ ...c }));
  conditions.set(status.conditions, conditions.newCondition("Ready", ready, reason, message, generation));
  if (app.status === undefined || canonical(typedStatus(app.status)) !== canonical(status)) {
    apps.applyStatus(name, status, MANAGER, true);
  }

  const was = conditions.get(old.conditions, "Ready")?.status;
  if (was !== conditions.get(status.conditions, "Ready")?.status) {
    const note = `${readyReplicas}/${desired} replicas ready`;
    try {
      new Recorder(WebApp, app).publish("Normal", reason, "Reconcile", note);
    } catch (e) {
      // Events are best-effort.
      if (!(e instanceof ApiError)) throw e;
      log.warn(`could not record an event: ${e}`);
    }
  }
  return ready ? Action.done() : Action.requeueAfter(POLL_MS);
}

/**
 * The status as the plugin models it (observedGeneration, conditions), in
 * a fixed field order: other fields someone else wrote do not count as a
 * difference.
 */
function typedStatus(status: WebAppStatus | undefined): WebAppStatus {
  const typed: WebAppStatus = {};
  if (status?.observedGeneration != null) typed.observedGeneration = status.observedGeneration;
  typed.conditions = (status?.conditions ?? []).map((c) => {
    const { type, status: s, reason, message, lastTransitionTime, observedGeneration } = c;
    const copy: Condition = { type, status: s, reason, message, lastTransitionTime };
    if (observedGeneration != null) copy.observedGeneration = observedGeneration;
    return copy;
  });
  return typed;
}

/** JSON text with sorted keys, to compare values. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

/** Makes the `webapp-registry` entry for `name` be `url`, or absent. */
function register(namespace: string, name: string, url: string | undefined): void {
  const configmaps = Api.namespaced<KubeObject & { data?: Record<string, string> }>(kinds.ConfigMap, namespace);
  const current = configmaps.getOpt(REGISTRY);
  const entry = current?.data?.[name];
  if (entry === url) return;
  if (current === undefined && url !== undefined) {
    try {
      configmaps.create({ metadata: { name: REGISTRY }, data: { [name]: url } });
      return;
    } catch (e) {
      // Created concurrently by another WebApp: patch it below.
      if (!(e instanceof AlreadyExists)) throw e;
    }
  }
  // A merge patch touches only this key; null removes it.
  try {
    configmaps.patch(REGISTRY, Patch.merge({ data: { [name]: url ?? null } }));
  } catch (e) {
    if (!(e instanceof NotFound) || url !== undefined) throw e;
  }
}

function labels(app: WebAppObject): Record<string, string> {
  return { "app.kubernetes.io/instance": nameOf(app), "app.kubernetes.io/name": "webapp" };
}

function ownedMeta(app: WebAppObject, owner: OwnerReference) {
  return {
    name: nameOf(app),
    labels: { ...labels(app), "app.kubernetes.io/managed-by": MANAGER },
    ownerReferences: [owner],
  };
}

function deploymentFor(app: WebAppObject, owner: OwnerReference, image: string, replicas: number, port: number): KubeObject {
  return {
    metadata: ownedMeta(app, owner),
    spec: {
      replicas,
      selector: { matchLabels: labels(app) },
      template: {
        metadata: { labels: labels(app) },
        spec: { containers: [{ name: "web", image, ports: [{ name: "http", containerPort: port }] }] },
      },
    },
  };
}

function serviceFor(app: WebAppObject, owner: OwnerReference, port: number): KubeObject {
  return {
    metadata: ownedMeta(app, owner),
    spec: { selector: labels(app), ports: [{ name: "http", port, targetPort: "http" }] },
  };
}

/** The most replicas a WebApp may ask for. */
export const MAX_REPLICAS = 50;
export const MANAGED_BY = "app.kubernetes.io/managed-by";

/** Whether `image` names a tag or a digest. A registry's port
 * (`localhost:5000/web`) is not a tag: the tag is after the last `/`. */
export function pinned(image: string): boolean {
  const last = image.slice(image.lastIndexOf("/") + 1);
  return image.includes("@") || last.includes(":");
}

/** Refuses WebApps the operator cannot run; labels and defaults the rest. */
export class WebAppAdmission implements admission.Validator, admission.Defaulter {
  readonly kind = WebApp;

  validateCreate(app: WebAppObject): string[] {
    const replicas = app.spec?.replicas ?? 1;
    const image = app.spec?.image ?? "";
    const errors = new admission.FieldErrors();
    if (!Number.isInteger(replicas) || replicas < 0 || replicas > MAX_REPLICAS) {
      errors.invalid("spec.replicas", replicas, `must be between 0 and ${MAX_REPLICAS}`);
    }
    if (!pinned(image)) errors.invalid("spec.image", image, "must name a tag (name:tag) or a digest (name@sha256:…)");
    errors.throwIfAny(WebApp, app);
    return [];
  }

  default(app: WebAppObject): void {
    const spec = (app.spec ??= { image: "" });
    spec.replicas ??= 1;
    spec.port ??= 80;
    const metadata = (app.metadata ??= {});
    metadata.labels = { ...(metadata.labels ?? {}), [MANAGED_BY]: "wasmctrl" };
  }
}
