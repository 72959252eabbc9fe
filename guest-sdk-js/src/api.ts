/** `Api`: get/list/create/replace/patch/apply/delete over the host's `kube` interface, kube-rs style. */
import { backend, type WirePatch } from "./host.js";
import { Invalid, NotFound, Serialization } from "./errors.js";
import { apiVersionOf, type Kind } from "./metadata.js";
import type { Json, KubeObject } from "./objects.js";

/** One RFC 6902 operation. */
export type PatchOp =
  | { op: "test"; path: string; value: unknown }
  | { op: "add"; path: string; value: unknown }
  | { op: "replace"; path: string; value: unknown }
  | { op: "remove"; path: string };

/** RFC 6902 operations. */
export const PatchOp = {
  /** Fails the whole patch unless the value at `path` equals `value` (`null` also matches an absent key whose parent exists). */
  test: (path: string, value: unknown): PatchOp => ({ op: "test", path, value }),
  add: (path: string, value: unknown): PatchOp => ({ op: "add", path, value }),
  replace: (path: string, value: unknown): PatchOp => ({ op: "replace", path, value }),
  remove: (path: string): PatchOp => ({ op: "remove", path }),
};

/** Escapes one JSON-pointer segment (RFC 6901: `~` → `~0`, `/` → `~1`), e.g. a label key. */
export function escapePointer(segment: string): string {
  return segment.replaceAll("~", "~0").replaceAll("/", "~1");
}

/** A patch body, serialized to JSON when sent. */
export type Patch =
  | { type: "merge"; body: unknown }
  | { type: "json"; body: PatchOp[] }
  | { type: "apply"; body: unknown; fieldManager: string; force: boolean };

export const Patch = {
  /** JSON merge patch (RFC 7386): objects merge, lists are replaced whole, `null` deletes a key. */
  merge: (body: unknown): Patch => ({ type: "merge", body }),
  /** JSON patch (RFC 6902), applied atomically: a failed `test` fails it with {@link Invalid}. */
  json: (ops: PatchOp[]): Patch => ({ type: "json", body: ops }),
  /**
   * Server-side apply of the (partial) object `body` as `fieldManager`;
   * `force` takes over fields another manager owns instead of failing with
   * `Conflict`. `body` must carry `apiVersion`, `kind` and `metadata.name`.
   */
  apply: (body: unknown, fieldManager: string, force = false): Patch => ({ type: "apply", body, fieldManager, force }),
};

/** JSON text of `value`; {@link Serialization} if it has no JSON form. */
export function encode(value: unknown): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value, (_key, v: unknown) => {
      if (typeof v === "bigint") {
        if (!Number.isSafeInteger(Number(v))) throw new TypeError(`${v} does not fit a JSON number exactly`);
        return Number(v);
      }
      if (typeof v === "number" && !Number.isFinite(v)) throw new TypeError(`${v} is not a JSON number`);
      if (typeof v === "function" || typeof v === "symbol") throw new TypeError(`a ${typeof v} is not JSON`);
      return v;
    });
  } catch (e) {
    throw new Serialization(`cannot serialize the request body: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (text === undefined) throw new Serialization("cannot serialize the request body: it has no JSON form");
  return text;
}

/** The object in `text`; {@link Serialization} unless it is a JSON object. */
export function decode<T>(text: string, what: string): T {
  let value: Json;
  try {
    value = JSON.parse(text) as Json;
  } catch (e) {
    throw new Serialization(`the ${what} returned is not valid JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new Serialization(`the ${what} returned is not a JSON object`);
  }
  return value as T;
}

function wire(patch: Patch): WirePatch {
  if (patch.type === "apply") {
    return { type: "apply", body: encode(patch.body), fieldManager: patch.fieldManager, force: patch.force };
  }
  return { type: patch.type, body: encode(patch.body) };
}

/**
 * A handle on the objects of one kind, in one namespace or in all of them.
 * `T` types the objects (`Api<KubeObject<WebAppSpec, WebAppStatus>>`).
 *
 * Every call goes through the host, which checks it against the plugin's
 * permission grant (verb × group/resource × namespace; a denied call is
 * `Forbidden`) and bounds it by the reconcile's deadline (`Timeout`). `get`
 * and `list` of a kind the plugin watches are served from the host's shared
 * cache, which may lag a write made a moment ago; writes return the object
 * as the API server stored it.
 */
export class Api<T extends KubeObject = KubeObject> {
  private constructor(
    readonly kind: Kind,
    /** Undefined: all namespaces, or a cluster-scoped kind. */
    readonly namespace: string | undefined,
  ) {}

  /** Objects of a namespaced kind in `namespace`. */
  static namespaced<T extends KubeObject = KubeObject>(kind: Kind, namespace: string): Api<T> {
    if (!kind.namespaced) throw new TypeError(`${kind.kind} is cluster-scoped: use Api.all`);
    if (!namespace) throw new TypeError("Api.namespaced: the namespace is empty");
    return new Api<T>(kind, namespace);
  }

  /** Objects in every namespace (for a namespaced kind only `list` makes sense), or of a cluster-scoped kind. */
  static all<T extends KubeObject = KubeObject>(kind: Kind): Api<T> {
    return new Api<T>(kind, undefined);
  }

  /** The object named `name`; {@link NotFound} if it does not exist. */
  get(name: string): T {
    return this.decode(backend().get(this.kind, this.namespace, name));
  }

  /** The object named `name`, or undefined if it does not exist. */
  getOpt(name: string): T | undefined {
    try {
      return this.get(name);
    } catch (e) {
      if (e instanceof NotFound) return undefined;
      throw e;
    }
  }

  /** Every object of the kind in this handle's scope, or those whose labels match `labelSelector` (`app=web,tier!=cache`). */
  list(labelSelector?: string): T[] {
    return backend()
      .list(this.kind, this.namespace, labelSelector)
      .map((item) => this.decode(item));
  }

  /** Creates `obj` (`AlreadyExists` if the name is taken) and returns it as stored. */
  create(obj: T): T {
    const body = encode(this.typed(obj));
    return this.decode(backend().create(this.kind, this.namespace, body));
  }

  /**
   * Replaces the object named `name` with `obj` (PUT). With
   * `metadata.resourceVersion` set, a concurrent write makes this fail with
   * `Conflict`. The status is not changed.
   */
  replace(name: string, obj: T): T {
    const body = encode(this.typed(obj));
    return this.decode(backend().replace(this.kind, this.namespace, name, body));
  }

  /** Patches the object named `name` and returns it as stored. */
  patch(name: string, patch: Patch): T {
    const w = wire(patch);
    return this.decode(backend().patch(this.kind, this.namespace, name, w));
  }

  /**
   * Server-side apply of `obj` as `fieldManager`: creates the object if it
   * does not exist, otherwise sets exactly the fields `obj` sets and removes
   * fields this manager set before but `obj` no longer does. `force` takes
   * ownership of fields another manager set (what a controller wants for
   * the objects it owns). The name comes from `metadata.name`; `apiVersion`
   * and `kind` from this handle's kind.
   */
  apply(obj: T, fieldManager: string, force = false): T {
    const name = obj.metadata?.name;
    if (!name) throw new Invalid("apply: the object has no metadata.name");
    return this.patch(name, Patch.apply(this.typed(obj), fieldManager, force));
  }

  /** Patches the status subresource of the object named `name`. */
  patchStatus(name: string, patch: Patch): T {
    const w = wire(patch);
    return this.decode(backend().patchStatus(this.kind, this.namespace, name, w));
  }

  /**
   * Server-side apply of `status` to the status subresource of the object
   * named `name` (the body sent is `{apiVersion, kind, metadata: {name},
   * status}`). Fields this manager set before and `status` no longer sets
   * are removed.
   */
  applyStatus(name: string, status: T["status"], fieldManager: string, force = false): T {
    const body = { apiVersion: apiVersionOf(this.kind), kind: this.kind.kind, metadata: { name }, status };
    return this.patchStatus(name, Patch.apply(body, fieldManager, force));
  }

  /** Replaces the status of the object named `name` with `obj`'s (PUT to the status subresource, guarded by `resourceVersion`). */
  replaceStatus(name: string, obj: T): T {
    const body = encode(this.typed(obj));
    return this.decode(backend().replaceStatus(this.kind, this.namespace, name, body));
  }

  /**
   * Deletes the object named `name` (in the background: dependents are
   * garbage-collected, and finalizers may keep the object a while). Returns
   * false if it did not exist.
   */
  delete(name: string): boolean {
    try {
      backend().delete(this.kind, this.namespace, name);
      return true;
    } catch (e) {
      if (e instanceof NotFound) return false;
      throw e;
    }
  }

  private decode(text: string): T {
    return decode<T>(text, this.kind.kind);
  }

  /** `obj` with this kind's `apiVersion` and `kind`. */
  private typed(obj: T): KubeObject {
    if (obj === null || typeof obj !== "object" || Array.isArray(obj)) {
      throw new Serialization(`a ${this.kind.kind} is an object`);
    }
    const { apiVersion: _a, kind: _k, ...rest } = obj;
    return { apiVersion: apiVersionOf(this.kind), kind: this.kind.kind, ...rest };
  }
}
