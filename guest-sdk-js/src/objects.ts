/**
 * Objects are the API's JSON, parsed: {@link KubeObject}. These helpers read
 * their metadata.
 */
import { apiVersionOf, type Gvk, ObjectKey } from "./metadata.js";

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** `metav1.ObjectMeta`, with the fields the SDK reads typed. */
export interface ObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  finalizers?: string[];
  ownerReferences?: OwnerReference[];
  deletionTimestamp?: string;
  creationTimestamp?: string;
  [key: string]: unknown;
}

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

/**
 * A Kubernetes object. `Spec` and `Status` type its `spec` and `status`
 * (`KubeObject<WebAppSpec, WebAppStatus>`); other fields are open.
 */
export interface KubeObject<Spec = unknown, Status = unknown> {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
  spec?: Spec;
  status?: Status;
  [key: string]: unknown;
}

/** `metadata.name`, or "" if unset. */
export function nameOf(obj: KubeObject): string {
  return obj.metadata?.name ?? "";
}

/** `metadata.namespace` (undefined for cluster-scoped objects). */
export function namespaceOf(obj: KubeObject): string | undefined {
  return obj.metadata?.namespace;
}

/** The object's key: its namespace and name. */
export function keyOf(obj: KubeObject): ObjectKey {
  return new ObjectKey(namespaceOf(obj), nameOf(obj));
}

/** True once the object is being deleted (`metadata.deletionTimestamp` is set). */
export function isDeleting(obj: KubeObject): boolean {
  return obj.metadata?.deletionTimestamp != null;
}

export function finalizersOf(obj: KubeObject): string[] {
  return [...(obj.metadata?.finalizers ?? [])];
}

/** True if `obj` carries the finalizer `name`. */
export function hasFinalizer(obj: KubeObject, name: string): boolean {
  return finalizersOf(obj).includes(name);
}

/**
 * An ownerReference making `obj` (of kind `k`) the controller of another
 * object: `controller: true`, `blockOwnerDeletion: true`. Put it in the
 * owned object's `metadata.ownerReferences`: the API server
 * garbage-collects the owned object with its owner, and the host maps the
 * owned object's events to the owner's key (`Metadata.owns`). Undefined if
 * `obj` has no name or uid (it was not read from the API).
 */
export function controllerOwnerRef(k: Gvk, obj: KubeObject): OwnerReference | undefined {
  const { name, uid } = obj.metadata ?? {};
  if (!name || !uid) return undefined;
  return { apiVersion: apiVersionOf(k), kind: k.kind, name, uid, controller: true, blockOwnerDeletion: true };
}

/**
 * A new object of kind `k`: `apiVersion`, `kind`, `metadata.name`, and the
 * other top-level `fields` (`newObject<WebAppObject>(WebApp, "hello", { spec })`).
 */
export function newObject<T extends KubeObject = KubeObject>(
  k: Gvk,
  name: string,
  fields: Omit<T, "apiVersion" | "kind" | "metadata"> = {} as Omit<T, "apiVersion" | "kind" | "metadata">,
): T {
  return { apiVersion: apiVersionOf(k), kind: k.kind, metadata: { name }, ...fields } as T;
}
