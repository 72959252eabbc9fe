import { PermanentError } from "./errors.js";

/** The key of the object a reconcile is asked for. */
export class ObjectKey {
  constructor(
    /** Undefined for cluster-scoped objects. */
    readonly namespace: string | undefined,
    readonly name: string,
  ) {}

  static namespaced(namespace: string, name: string): ObjectKey {
    return new ObjectKey(namespace, name);
  }

  static cluster(name: string): ObjectKey {
    return new ObjectKey(undefined, name);
  }

  /**
   * The namespace, or a {@link PermanentError} for a key without one (a
   * namespaced kind's reconciler can only get such a key by mistake).
   */
  requireNamespace(): string {
    if (this.namespace === undefined) throw new PermanentError(`key ${this} has no namespace`);
    return this.namespace;
  }

  toString(): string {
    return this.namespace === undefined ? this.name : `${this.namespace}/${this.name}`;
  }
}

/** A Kubernetes group/version/kind; the core group is "". */
export interface Gvk {
  readonly group: string;
  readonly version: string;
  readonly kind: string;
}

/** `apps/v1`, or `v1` for the core group. */
export function apiVersionOf(gvk: Gvk): string {
  return gvk.group ? `${gvk.group}/${gvk.version}` : gvk.version;
}

/**
 * A kind the SDK can read and write: its group/version/kind, its plural
 * resource name (as permissions name it) and its scope. `kinds` has the
 * common built-in kinds; declare your own with {@link kind}.
 */
export interface Kind extends Gvk {
  readonly plural: string;
  readonly namespaced: boolean;
}

/** Declares a kind: `kind("demo.wasmctrl.dev", "v1alpha1", "WebApp", "webapps")`. */
export function kind(group: string, version: string, kindName: string, plural: string, namespaced = true): Kind {
  return Object.freeze({ group, version, kind: kindName, plural, namespaced });
}

/** The group/version/kind of a kind. */
export function gvkOf(k: Gvk): Gvk {
  return { group: k.group, version: k.version, kind: k.kind };
}

/**
 * How a watched object maps to the key of the reconciled object: through
 * its ownerReferences (`owner`), to the object of the same name
 * (`same-name`), or to the object named by a label's value (`label`).
 */
export type WatchMapping = { tag: "owner" } | { tag: "same-name" } | { tag: "label"; val: string };

export const WatchMapping = {
  owner: { tag: "owner" } as WatchMapping,
  sameName: { tag: "same-name" } as WatchMapping,
  label: (name: string): WatchMapping => ({ tag: "label", val: name }),
};

export interface Permission {
  readonly group: string;
  readonly resources: readonly string[];
  readonly verbs: readonly string[];
}

/**
 * What a plugin reconciles, watches and needs permission for, built with
 * chained calls:
 *
 * ```ts
 * new Metadata("webapp", "0.1.0", WebApp).owns(kinds.Deployment)
 *   .permission("apps", ["deployments"], ["list", "watch", "patch"])
 * ```
 */
export class Metadata {
  readonly owned: Gvk[] = [];
  readonly watched: { kind: Gvk; mapping: WatchMapping }[] = [];
  readonly permissions: Permission[] = [];
  readonly for: Gvk;

  constructor(
    readonly name: string,
    readonly version: string,
    reconciles: Gvk,
  ) {
    this.for = gvkOf(reconciles);
  }

  /** Objects of this kind controlled by a reconciled object enqueue their owner. */
  owns(k: Gvk): this {
    this.owned.push(gvkOf(k));
    return this;
  }

  /** Objects of this kind enqueue the key `mapping` names. */
  watches(k: Gvk, mapping: WatchMapping): this {
    this.watched.push({ kind: gvkOf(k), mapping });
    return this;
  }

  /**
   * The plugin needs `verbs` on `resources` of API `group` ("" is core).
   * The host refuses to load a plugin asking for more than its grant.
   */
  permission(group: string, resources: readonly string[], verbs: readonly string[]): this {
    this.permissions.push({ group, resources: [...resources], verbs: [...verbs] });
    return this;
  }
}
