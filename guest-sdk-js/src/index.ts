/**
 * @wasmctrl/sdk: write a wasmctrl reconciler in TypeScript.
 *
 * A plugin implements {@link Reconciler}; its entry module exports it with
 * `exportReconciler` from `@wasmctrl/sdk/component`, and `wasmctrl build
 * <dir>` turns it into a component of the `wasmctrl:reconciler@0.1.3` world
 * with componentize-js. Objects are the API's JSON ({@link KubeObject}).
 * Unit tests run natively against `FakeCluster` from `@wasmctrl/sdk/testing`.
 */
export { Action } from "./action.js";
export * as admission from "./admission.js";
export { Api, Patch, PatchOp, escapePointer } from "./api.js";
export * as conditions from "./conditions.js";
export type { Condition } from "./conditions.js";
export { Context } from "./context.js";
export {
  AlreadyExists,
  ApiError,
  type ApiErrorCode,
  Conflict,
  Forbidden,
  Invalid,
  NotFound,
  Other,
  PermanentError,
  ReconcileError,
  Serialization,
  Timeout,
  TransientError,
  Unavailable,
} from "./errors.js";
export { type EventType, Recorder } from "./events.js";
export { finalizer, type FinalizerEvent } from "./finalizer.js";
export * as http from "./http.js";
export * as kinds from "./kinds.js";
export * as log from "./log.js";
export { apiVersionOf, type Gvk, type Kind, kind, Metadata, ObjectKey, type Permission, WatchMapping } from "./metadata.js";
export {
  controllerOwnerRef,
  finalizersOf,
  hasFinalizer,
  isDeleting,
  type Json,
  keyOf,
  type KubeObject,
  nameOf,
  namespaceOf,
  newObject,
  type ObjectMeta,
  type OwnerReference,
} from "./objects.js";
export type { Reconciler } from "./reconciler.js";
export * as secrets from "./secrets.js";
