/**
 * Unit-test a reconciler natively (`node --test`), against an in-memory
 * fake API server.
 *
 * ```ts
 * const cluster = new FakeCluster();
 * const configmaps = Api.namespaced(kinds.ConfigMap, "default");
 * configmaps.create(newObject(kinds.ConfigMap, "app"));
 * assert.deepEqual(cluster.reconcile(new Labeler(), ObjectKey.namespaced("default", "app")), Action.done());
 * assert.deepEqual(cluster.unusedPermissions(new Labeler()), []);
 * ```
 *
 * While a `FakeCluster` is installed (from its creation until
 * {@link FakeCluster.close}, or the next one), every SDK call (`Api`,
 * events, `Context`, logging) goes to it; tests use the same `Api` to set
 * the scene and to look at the result. During {@link FakeCluster.reconcile}
 * each call is checked against the reconciler's declared permissions, as the
 * host checks it against the grant: a call the metadata does not cover fails
 * with `Forbidden`.
 *
 * What the fake models (the same as the Rust SDK's `testing::FakeCluster`):
 * objects are JSON keyed by group, kind, namespace and name. Writes assign
 * `uid`, `resourceVersion`, `creationTimestamp` and `generation` (bumped
 * when anything outside `metadata` and `status` changes); a write that
 * changes nothing is a no-op. Every kind behaves as if it had a status
 * subresource. A `resourceVersion` in a replace or patch body must match
 * (else `Conflict`). Merge and JSON patches follow RFC 7386 and RFC 6902 (a
 * failed `test` is `Invalid`). Deleting an object with finalizers sets its
 * `deletionTimestamp`; it goes away when the last finalizer is removed, and
 * then objects whose ownerReferences name its uid are deleted too. Label
 * selectors support `k=v`, `k==v`, `k!=v`, `k` and `!k`. Server-side apply
 * is "create, or merge the applied object into the stored one": no field
 * ownership, no apply conflicts. Plurals are derived from kinds the way
 * Kubernetes does by default.
 */
import type { Action } from "./action.js";
import * as admission from "./admission.js";
import { AlreadyExists, type ApiError, Conflict, Forbidden, Invalid, NotFound } from "./errors.js";
import { type Backend, install, installed, type LogLevel, type WirePatch, type WireEvent } from "./host.js";
import { HttpError, type WireRequest, type WireResponse } from "./http.js";
import type { Gvk, Kind, ObjectKey, Permission } from "./metadata.js";
import { now } from "./conditions.js";
import type { Json } from "./objects.js";
import { metadataOf, type Reconciler, run } from "./reconciler.js";
import * as utf8 from "./utf8.js";

type Obj = { [key: string]: Json };

/** One call the SDK made through the host's `kube` interface. */
export interface Call {
  /** get, list, create, replace, patch, replace-status, patch-status, delete or record-event. */
  verb: string;
  kind: Gvk;
  namespace: string | undefined;
  /** "" for list and create. */
  name: string;
  /** What was sent: the object, the patch, the label selector of a list (a string or null), or for an event {type, reason, action, note}. */
  body: Json;
  /** For patches: "merge", "json", or "apply <field manager> force=<bool>". */
  patch: string;
}

export interface LogLine {
  level: LogLevel;
  message: string;
  fields: [string, string][];
}

/** Kubernetes' default plural of a kind. */
export function plural(kind: string): string {
  const lower = kind.toLowerCase();
  if (lower.endsWith("y") && !/[aeiou]$/.test(lower.slice(0, -1))) return `${lower.slice(0, -1)}ies`;
  if (/(s|x|z|ch|sh)$/.test(lower)) return `${lower}es`;
  return `${lower}s`;
}

function clone<T>(value: T): T {
  return value === undefined ? value : (JSON.parse(JSON.stringify(value)) as T);
}

function same(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== "object") return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bs = b as unknown[];
    return a.length === bs.length && a.every((x, i) => same(x, bs[i]));
  }
  const ao = a as Obj;
  const bo = b as Obj;
  const keys = Object.keys(ao);
  return keys.length === Object.keys(bo).length && keys.every((k) => k in bo && same(ao[k], bo[k]));
}

function keyString(kind: Gvk, namespace: string | undefined, name: string): string {
  return JSON.stringify([kind.group, kind.kind, namespace ?? null, name]);
}

/** Sorts like the Rust fake's BTreeMap: group, kind, (no namespace first), namespace, name. */
function sortKey(k: string): string {
  const [group, kind, ns, name] = JSON.parse(k) as [string, string, string | null, string];
  return JSON.stringify([group, kind, ns === null ? 0 : 1, ns ?? "", name]);
}

function meta(obj: Obj): Obj {
  const m = obj["metadata"];
  if (m === null || typeof m !== "object" || Array.isArray(m)) {
    const fresh: Obj = {};
    obj["metadata"] = fresh;
    return fresh;
  }
  return m;
}

function finalizers(obj: Obj): Json[] {
  const f = (obj["metadata"] as Obj | undefined)?.["finalizers"];
  return Array.isArray(f) ? f : [];
}

function isDeleting(obj: Obj): boolean {
  const d = (obj["metadata"] as Obj | undefined)?.["deletionTimestamp"];
  return d !== undefined && d !== null;
}

function without(obj: Obj, ...fields: string[]): Obj {
  const o: Obj = {};
  for (const [k, v] of Object.entries(obj)) if (!fields.includes(k)) o[k] = v;
  return o;
}

function parse(text: string): Json {
  try {
    return JSON.parse(text) as Json;
  } catch (e) {
    throw new Invalid(`invalid JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
}

function asObject(value: Json, what: string): Obj {
  if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Invalid(`${what} is not a JSON object`);
  return value;
}

function notFound(kind: Gvk, namespace: string | undefined, name: string): NotFound {
  return new NotFound(`${kind.kind} ${namespace !== undefined ? `${namespace}/` : ""}${name} not found`);
}

/** The in-memory API server of the tests; see the module docs. Creating one installs it. */
export class FakeCluster implements Backend {
  private objects = new Map<string, Obj>();
  private revision = 0;
  private callLog: Call[] = [];
  private faults: [string, ApiError][] = [];
  private held: Permission[] | undefined;
  private used = new Set<string>();
  private attemptValue = 0;
  private settingsText = "{}";
  private cancelledValue = false;
  private deadlineMs = 10_000;
  private secretValues = new Map<string, [string, boolean]>();
  private httpAnswers: [string, string, WireResponse][] = [];
  /** During a review: the export under review, whose writes are refused. */
  private reviewing: string | undefined;
  /** Every outbound request the plugin sent, in order, answered or not. */
  readonly httpRequests: WireRequest[] = [];
  /** Every log line, in order. */
  readonly logs: LogLine[] = [];
  /** The lowest level `log.enabled` reports as kept (as the host's filter would). */
  logLevel: LogLevel = "trace";

  constructor() {
    install(this);
  }

  /** Uninstalls the cluster (if it is still the installed one). */
  close(): void {
    if (installed() === this) install(undefined);
  }

  // --- driving --------------------------------------------------------------

  private review(
    exportName: string,
    run: (request: string) => admission.Verdict,
    operation: admission.Operation,
    kind: Kind,
    obj: any,
    old: any,
  ): admission.Verdict {
    const meta = (obj ?? old)?.metadata ?? {};
    const request = JSON.stringify({
      uid: "00000000-0000-0000-0000-000000000000",
      kind: { group: kind.group, version: kind.version, kind: kind.kind },
      resource: { group: kind.group, version: kind.version, resource: kind.plural },
      name: meta.name ?? "",
      namespace: meta.namespace,
      operation,
      userInfo: { username: "tester", groups: ["system:authenticated"] },
      object: obj ?? null,
      oldObject: old ?? null,
      dryRun: false,
    });
    this.reviewing = exportName;
    try {
      return run(request);
    } finally {
      this.reviewing = undefined;
    }
  }

  private static warnings(v: admission.Verdict): string[] {
    if (!v.allowed) throw new admission.Denied(v.message, v.code, v.causes);
    return v.warnings;
  }

  /** Runs `validator` on a CREATE of `obj` as the host would (reads from
   * this cluster, writes refused): its warnings, or throws the `Denied` it
   * answered. */
  validateCreate(validator: admission.Validator, obj: any): string[] {
    const run = (r: string) => admission.validate(validator, r);
    return FakeCluster.warnings(this.review("validate", run, "CREATE", validator.kind, obj, null));
  }

  validateUpdate(validator: admission.Validator, old: any, obj: any): string[] {
    const run = (r: string) => admission.validate(validator, r);
    return FakeCluster.warnings(this.review("validate", run, "UPDATE", validator.kind, obj, old));
  }

  validateDelete(validator: admission.Validator, obj: any): string[] {
    const run = (r: string) => admission.validate(validator, r);
    return FakeCluster.warnings(this.review("validate", run, "DELETE", validator.kind, null, obj));
  }

  /** Runs `defaulter` on a CREATE of `obj`: the object as it would be
   * admitted (`obj` itself is left as it was). */
  defaultObject(defaulter: admission.Defaulter, obj: any): any {
    const run = (r: string) => admission.mutate(defaulter, r);
    const v = this.review("mutate", run, "CREATE", defaulter.kind, clone(obj), null);
    FakeCluster.warnings(v);
    return v.patched !== undefined ? JSON.parse(v.patched) : clone(obj);
  }

  /**
   * Runs `reconciler.reconcile(key)` as the host would, with every call
   * checked against its metadata's permissions. Returns the action or
   * throws the `ReconcileError` the host would get (an escaping `ApiError`
   * converted by the transient/permanent rule); any other exception
   * propagates as it is.
   */
  reconcile(reconciler: Reconciler, key: ObjectKey): Action {
    this.held = [...metadataOf(reconciler).permissions];
    try {
      return run(reconciler, key, false);
    } finally {
      this.held = undefined;
    }
  }

  /**
   * Gives the plugin secret `name`: `secrets.reveal` answers `value` where
   * `reveal` is true and refuses as the host does otherwise.
   */
  setSecret(name: string, value: string, reveal = false): void {
    this.secretValues.set(name, [value, reveal]);
  }

  reveal(name: string): string {
    const held = this.secretValues.get(name);
    if (held === undefined) {
      throw new NotFound(`no secret named ${JSON.stringify(name)} (the fake holds only those set with setSecret)`);
    }
    if (!held[1]) {
      throw new Forbidden(
        `secret ${JSON.stringify(name)} is not revealed to the plugin: its secrets entry does not say reveal: true`,
      );
    }
    return held[0];
  }

  /**
   * Answers the next outbound `method url` request with `status` and
   * `body`, once; a request without a canned answer fails as one the host
   * refused.
   */
  answerHttp(method: string, url: string, status: number, body: Uint8Array | string = "", headers: [string, string][] = []): void {
    const bytes = typeof body === "string" ? utf8.encode(body) : body;
    const encoded: [string, Uint8Array][] = headers.map(([n, v]) => [n, utf8.encode(v)]);
    this.httpAnswers.push([method, url, { status, headers: encoded, body: bytes }]);
  }

  httpSend(request: WireRequest): WireResponse {
    this.httpRequests.push({ ...request, headers: [...request.headers], body: request.body.slice() });
    const i = this.httpAnswers.findIndex(([method, url]) => method === request.method && url === request.url);
    if (i < 0) {
      throw new HttpError(
        `HTTP request failed: no canned answer for ${request.method} ${request.url} ` +
          "(FakeCluster.answerHttp); the host would refuse what the grant does not allow",
      );
    }
    const [, , answer] = this.httpAnswers.splice(i, 1)[0]!;
    return answer;
  }

  /** The value `Context.attempt` returns. */
  setAttempt(attempt: number): void {
    this.attemptValue = attempt;
  }

  /** The settings `Context.settings()` returns (serialized to JSON). */
  setSettings(settings: unknown): void {
    this.settingsText = JSON.stringify(settings);
  }

  /** The raw settings text (to test invalid settings). */
  setSettingsJson(text: string): void {
    this.settingsText = text;
  }

  setCancelled(cancelled: boolean): void {
    this.cancelledValue = cancelled;
  }

  setDeadlineRemainingMs(ms: number): void {
    this.deadlineMs = Math.max(0, Math.floor(ms));
  }

  /** Makes the next call with `verb` fail with `error` (once). */
  failNext(verb: string, error: ApiError): void {
    this.faults.push([verb, error]);
  }

  // --- looking --------------------------------------------------------------

  /** Every call made since the cluster was created or {@link clearCalls}. */
  calls(): Call[] {
    return clone(this.callLog).map((c, i) => ({ ...c, namespace: this.callLog[i]!.namespace }));
  }

  clearCalls(): void {
    this.callLog = [];
  }

  /** The events recorded, as calls with verb record-event. */
  events(): Call[] {
    return this.calls().filter((c) => c.verb === "record-event");
  }

  /**
   * Each [verb, group, resource] the calls made inside {@link reconcile} so
   * far needed permission for (status writes name `<plural>/status`; events
   * are create on events.k8s.io/events), sorted.
   */
  permissionsUsed(): [string, string, string][] {
    return [...this.used].sort().map((u) => JSON.parse(u) as [string, string, string]);
  }

  /**
   * The permissions `reconciler.metadata()` declares that no reconcile so
   * far needed, as [verb, group, resource]; list and watch are left out (the
   * host's informers use them). After a test that walks every path, an empty
   * result means the metadata asks for exactly what the plugin uses.
   */
  unusedPermissions(reconciler: Reconciler): [string, string, string][] {
    const unused: [string, string, string][] = [];
    for (const p of metadataOf(reconciler).permissions) {
      for (const resource of p.resources) {
        for (const verb of p.verbs) {
          const need: [string, string, string] = [verb, p.group, resource];
          if (verb !== "list" && verb !== "watch" && !this.used.has(JSON.stringify(need))) unused.push(need);
        }
      }
    }
    return unused;
  }

  // --- the backend the SDK calls ----------------------------------------------

  deadlineRemainingMs(): number {
    return this.deadlineMs;
  }

  cancelled(): boolean {
    return this.cancelledValue;
  }

  attempt(): number {
    return this.attemptValue;
  }

  settings(): string {
    return this.settingsText;
  }

  log(level: LogLevel, message: string, fields: [string, string][]): void {
    this.logs.push({ level, message, fields: [...fields] });
  }

  logEnabled(level: LogLevel): boolean {
    const order: LogLevel[] = ["trace", "debug", "info", "warn", "error"];
    return order.indexOf(level) >= order.indexOf(this.logLevel);
  }

  get(kind: Gvk, namespace: string | undefined, name: string): string {
    this.admit({ verb: "get", kind, namespace, name, body: null, patch: "" });
    return JSON.stringify(this.objects.get(this.existing(kind, namespace, name)));
  }

  list(kind: Gvk, namespace: string | undefined, labelSelector: string | undefined): string[] {
    this.admit({ verb: "list", kind, namespace, name: "", body: labelSelector ?? null, patch: "" });
    const items: string[] = [];
    const keys = [...this.objects.keys()].sort((a, b) => (sortKey(a) < sortKey(b) ? -1 : 1));
    for (const k of keys) {
      const [group, kindName, ns] = JSON.parse(k) as [string, string, string | null];
      if (group !== kind.group || kindName !== kind.kind || (namespace !== undefined && ns !== namespace)) continue;
      const obj = this.objects.get(k)!;
      if (labelSelector === undefined || matchesSelector(obj, labelSelector)) items.push(JSON.stringify(obj));
    }
    return items;
  }

  create(kind: Gvk, namespace: string | undefined, body: string): string {
    const obj = asObject(parse(body), "the object");
    this.admit({ verb: "create", kind, namespace, name: "", body: obj, patch: "" });
    const name = (obj["metadata"] as Obj | undefined)?.["name"];
    if (typeof name !== "string" || !name) throw new Invalid("metadata.name is required");
    return JSON.stringify(this.createAt(keyString(kind, namespace, name), obj));
  }

  replace(kind: Gvk, namespace: string | undefined, name: string, body: string): string {
    const obj = asObject(parse(body), "the object");
    this.admit({ verb: "replace", kind, namespace, name, body: obj, patch: "" });
    return JSON.stringify(this.update(this.existing(kind, namespace, name), obj, false));
  }

  replaceStatus(kind: Gvk, namespace: string | undefined, name: string, body: string): string {
    const obj = asObject(parse(body), "the object");
    this.admit({ verb: "replace-status", kind, namespace, name, body: obj, patch: "" });
    return JSON.stringify(this.update(this.existing(kind, namespace, name), obj, true));
  }

  patch(kind: Gvk, namespace: string | undefined, name: string, patch: WirePatch): string {
    return this.patchAny("patch", kind, namespace, name, patch);
  }

  patchStatus(kind: Gvk, namespace: string | undefined, name: string, patch: WirePatch): string {
    return this.patchAny("patch-status", kind, namespace, name, patch);
  }

  delete(kind: Gvk, namespace: string | undefined, name: string): void {
    this.admit({ verb: "delete", kind, namespace, name, body: null, patch: "" });
    this.deleteAt(this.existing(kind, namespace, name));
  }

  recordEvent(event: WireEvent): void {
    const body = { type: event.type, reason: event.reason, action: event.action, note: event.note };
    this.admit({
      verb: "record-event",
      kind: event.regardingKind,
      namespace: event.regardingNamespace,
      name: event.regardingName,
      body,
      patch: "",
    });
  }

  // --- the model --------------------------------------------------------------

  /** Records the call, then applies an injected fault or the permission check. */
  private admit(call: Call): void {
    let denied: ApiError | undefined;
    if (this.reviewing !== undefined && call.verb !== "get" && call.verb !== "list") {
      denied = new Forbidden(
        `${call.verb} ${call.kind.kind}: the host API is read-only during an admission review (${this.reviewing}); write from \`reconcile\` instead`,
      );
    }
    if (this.held !== undefined) {
      const [verb, group, resource] = needed(call);
      this.used.add(JSON.stringify([verb, group, resource]));
      const allowed = this.held.some(
        (p) =>
          p.group === group &&
          p.resources.some((r) => r === resource || r === "*") &&
          p.verbs.some((v) => v === verb || v === "*"),
      );
      if (!allowed && !denied) denied = new Forbidden(`${verb} on ${group || "core"}/${resource} is not in the plugin's permissions`);
    }
    this.callLog.push({ ...call, kind: { group: call.kind.group, version: call.kind.version, kind: call.kind.kind }, body: clone(call.body) });
    const i = this.faults.findIndex(([verb]) => verb === call.verb);
    if (i >= 0) {
      const [, error] = this.faults.splice(i, 1)[0]!;
      throw error;
    }
    if (denied) throw denied;
  }

  private existing(kind: Gvk, namespace: string | undefined, name: string): string {
    const k = keyString(kind, namespace, name);
    if (!this.objects.has(k)) throw notFound(kind, namespace, name);
    return k;
  }

  private nextRevision(): string {
    this.revision += 1;
    return String(this.revision);
  }

  private createAt(key: string, input: Obj): Obj {
    const [, kindName, ns, name] = JSON.parse(key) as [string, string, string | null, string];
    if (this.objects.has(key)) throw new AlreadyExists(`${kindName} ${name} already exists`);
    const revision = this.nextRevision();
    const obj = clone(input);
    const m = meta(obj);
    m["name"] = name;
    if (ns !== null) m["namespace"] = ns;
    m["uid"] = `uid-${revision}`;
    m["resourceVersion"] = revision;
    m["generation"] = 1;
    m["creationTimestamp"] = now();
    delete m["deletionTimestamp"];
    delete obj["status"];
    this.objects.set(key, obj);
    return clone(obj);
  }

  private update(key: string, input: Obj, statusOnly: boolean): Obj {
    const old = this.objects.get(key)!;
    const oldMeta = (old["metadata"] as Obj | undefined) ?? {};
    const rv = (input["metadata"] as Obj | undefined)?.["resourceVersion"];
    if (rv !== undefined && rv !== null && rv !== oldMeta["resourceVersion"]) {
      throw new Conflict(`the object has been modified (resourceVersion ${JSON.stringify(rv)} is stale)`);
    }
    let next: Obj;
    if (statusOnly) {
      next = clone(old);
      if (input["status"] === undefined || input["status"] === null) delete next["status"];
      else next["status"] = clone(input["status"]);
    } else {
      next = clone(input);
      if (old["status"] === undefined) delete next["status"];
      else next["status"] = clone(old["status"]);
    }
    const m = meta(next);
    for (const system of ["name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "generation", "resourceVersion"]) {
      if (system in oldMeta) m[system] = oldMeta[system]!;
      else delete m[system];
    }
    if (same(next, old)) return clone(old);
    if (!same(without(next, "metadata", "status"), without(old, "metadata", "status"))) {
      m["generation"] = Number(oldMeta["generation"] ?? 0) + 1;
    }
    m["resourceVersion"] = this.nextRevision();
    this.objects.set(key, next);
    if (isDeleting(next) && finalizers(next).length === 0) this.remove(key);
    return clone(next);
  }

  private deleteAt(key: string): void {
    const obj = this.objects.get(key)!;
    if (finalizers(obj).length === 0) {
      this.remove(key);
    } else if (!isDeleting(obj)) {
      const next = clone(obj);
      meta(next)["deletionTimestamp"] = now();
      meta(next)["resourceVersion"] = this.nextRevision();
      this.objects.set(key, next);
    }
  }

  /** Removes the object and garbage-collects its dependents. */
  private remove(key: string): void {
    const gone = this.objects.get(key);
    if (gone === undefined) return;
    this.objects.delete(key);
    const uid = (gone["metadata"] as Obj | undefined)?.["uid"];
    const dependents = [...this.objects.entries()]
      .filter(([, o]) => {
        const refs = (o["metadata"] as Obj | undefined)?.["ownerReferences"];
        return Array.isArray(refs) && refs.some((r) => (r as Obj)["uid"] === uid);
      })
      .map(([k]) => k);
    for (const d of dependents) if (this.objects.has(d)) this.deleteAt(d);
  }

  private patchAny(verb: string, kind: Gvk, namespace: string | undefined, name: string, patch: WirePatch): string {
    const body = parse(patch.body);
    const how = patch.type === "apply" ? `apply ${patch.fieldManager} force=${patch.force}` : patch.type;
    this.admit({ verb, kind, namespace, name, body, patch: how });
    const statusOnly = verb === "patch-status";
    const key = keyString(kind, namespace, name);
    const current = this.objects.get(key);
    if (current === undefined) {
      if (patch.type === "apply" && !statusOnly) return JSON.stringify(this.createAt(key, asObject(body, "the applied object")));
      throw notFound(kind, namespace, name);
    }
    const next = patch.type === "json" ? jsonPatch(current, body) : asObject(mergePatch(clone(current), body), "the patched object");
    return JSON.stringify(this.update(key, next, statusOnly));
  }
}

/** The verb, group and resource a call needs permission for. */
function needed(call: Call): [string, string, string] {
  const resource = plural(call.kind.kind);
  switch (call.verb) {
    case "record-event":
      return ["create", "events.k8s.io", "events"];
    case "replace-status":
      return ["update", call.kind.group, `${resource}/status`];
    case "patch-status":
      return ["patch", call.kind.group, `${resource}/status`];
    case "replace":
      return ["update", call.kind.group, resource];
    default:
      return [call.verb, call.kind.group, resource];
  }
}

/** RFC 7386. */
function mergePatch(target: Json | undefined, patch: Json): Json {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) return clone(patch);
  const t: Obj = target !== null && typeof target === "object" && !Array.isArray(target) && target !== undefined ? target : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete t[k];
    else t[k] = mergePatch(t[k], v);
  }
  return t;
}

function pointer(path: string): string[] | undefined {
  if (path === "") return [];
  if (!path.startsWith("/")) return undefined;
  return path
    .slice(1)
    .split("/")
    .map((t) => t.replaceAll("~1", "/").replaceAll("~0", "~"));
}

const MISSING = Symbol("missing");

function resolve(doc: Json, tokens: string[]): Json | typeof MISSING {
  let cur: Json = doc;
  for (const t of tokens) {
    if (Array.isArray(cur)) {
      if (!/^\d+$/.test(t) || Number(t) >= cur.length) return MISSING;
      cur = cur[Number(t)]!;
    } else if (cur !== null && typeof cur === "object") {
      if (!(t in cur)) return MISSING;
      cur = cur[t]!;
    } else {
      return MISSING;
    }
  }
  return cur;
}

/** RFC 6902, atomically. */
function jsonPatch(target: Obj, ops: Json): Obj {
  const invalid = (i: number, m: string): Invalid => new Invalid(`json patch operation ${i}: ${m}`);
  if (!Array.isArray(ops)) throw new Invalid("a json patch is an array of operations");
  const doc = clone(target);
  ops.forEach((raw, i) => {
    const op = raw as Obj;
    if (op === null || typeof op !== "object" || typeof op["path"] !== "string") throw invalid(i, "no path");
    const path = op["path"];
    const tokens = pointer(path);
    if (tokens === undefined) throw invalid(i, "bad path");
    const kind = op["op"];
    if (kind === "test") {
      const found = resolve(doc, tokens);
      const parentExists = tokens.length <= 1 || resolve(doc, tokens.slice(0, -1)) !== MISSING;
      const value = op["value"] ?? null;
      const ok = found !== MISSING ? same(found, value) : value === null && parentExists;
      if (!ok) throw invalid(i, `test failed at ${path}`);
    } else if (kind === "add" || kind === "replace") {
      if (tokens.length === 0) throw invalid(i, "root");
      const parent = resolve(doc, tokens.slice(0, -1));
      if (parent === MISSING) throw invalid(i, "no parent");
      if (!("value" in op)) throw invalid(i, "no value");
      const last = tokens[tokens.length - 1]!;
      const value = clone(op["value"]!);
      const replace = kind === "replace";
      if (Array.isArray(parent)) {
        let index: number;
        if (last === "-" && !replace) index = parent.length;
        else if (/^\d+$/.test(last)) index = Number(last);
        else throw invalid(i, "bad index");
        if (replace && index < parent.length) parent[index] = value;
        else if (!replace && index <= parent.length) parent.splice(index, 0, value);
        else throw invalid(i, "index out of range");
      } else if (parent !== null && typeof parent === "object") {
        if (replace && !(last in parent)) throw invalid(i, "replace of a missing key");
        parent[last] = value;
      } else {
        throw invalid(i, "parent is not a container");
      }
    } else if (kind === "remove") {
      if (tokens.length === 0) throw invalid(i, "root");
      const parent = resolve(doc, tokens.slice(0, -1));
      const last = tokens[tokens.length - 1]!;
      if (Array.isArray(parent) && /^\d+$/.test(last) && Number(last) < parent.length) parent.splice(Number(last), 1);
      else if (parent !== MISSING && parent !== null && typeof parent === "object" && !Array.isArray(parent) && last in parent)
        delete parent[last];
      else throw invalid(i, `nothing to remove at ${path}`);
    } else {
      throw invalid(i, `unsupported op ${JSON.stringify(kind)}`);
    }
  });
  return doc;
}

function matchesSelector(obj: Obj, selector: string): boolean {
  const labels = ((obj["metadata"] as Obj | undefined)?.["labels"] ?? {}) as Obj;
  const label = (k: string): Json | undefined => labels[k.trim()];
  for (const raw of selector.split(",")) {
    const term = raw.trim();
    if (!term) continue;
    let ok: boolean;
    if (term.includes("!=")) {
      const [k, v] = split(term, "!=");
      ok = label(k) !== v.trim();
    } else if (term.includes("=")) {
      const [k, v] = term.includes("==") ? split(term, "==") : split(term, "=");
      ok = label(k) === v.trim();
    } else if (term.startsWith("!")) {
      ok = label(term.slice(1)) === undefined;
    } else if (term.includes(" ") || term.includes("(")) {
      throw new Invalid(`the fake API server does not support the selector term ${JSON.stringify(term)}`);
    } else {
      ok = label(term) !== undefined;
    }
    if (!ok) return false;
  }
  return true;
}

function split(s: string, sep: string): [string, string] {
  const i = s.indexOf(sep);
  return [s.slice(0, i), s.slice(i + sep.length)];
}
