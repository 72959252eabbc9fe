import { Action } from "./action.js";
import { Context } from "./context.js";
import { ApiError, PermanentError, ReconcileError, TransientError } from "./errors.js";
import { backend } from "./host.js";
import { Metadata, type ObjectKey } from "./metadata.js";

/**
 * The one interface a plugin implements; export it with `exportReconciler`
 * from `@wasmctrl/sdk/component`.
 *
 * The host may call many reconciles, for any keys, on one instance of the
 * component (instance mode `reuse`): the reconciler object and module
 * variables can then outlive a reconcile. Keep per-reconcile state in local
 * variables; the SDK itself keeps none (each reconcile gets a new
 * {@link Context}).
 */
export interface Reconciler {
  /** What the plugin reconciles, watches and needs permission for. Called when the host loads the plugin. */
  metadata(): Metadata;
  /**
   * Bring the object named by `key` to its desired state; return an
   * {@link Action} (nothing means `Action.done()`) or throw a
   * {@link ReconcileError} (an escaping `ApiError` counts as transient or
   * permanent by its kind). May be called for objects that no longer exist
   * (the reconcile then sees NotFound and cleans up).
   */
  reconcile(key: ObjectKey, ctx: Context): Action | void;
}

/** @internal */
export function metadataOf(r: Reconciler): Metadata {
  const m = r.metadata();
  if (!(m instanceof Metadata)) throw new TypeError("metadata() must return a Metadata");
  return m;
}

/**
 * @internal One reconcile with a fresh {@link Context}: its action, or a
 * thrown {@link ReconcileError}. `containUnexpected` turns any other
 * exception into a transient error (and logs its stack), as the component
 * does; tests leave it off so a bug shows its own stack.
 */
export function run(r: Reconciler, key: ObjectKey, containUnexpected: boolean): Action {
  const ctx = new Context();
  let result: Action | void;
  try {
    result = r.reconcile(key, ctx);
  } catch (e) {
    if (e instanceof ReconcileError) throw e;
    if (e instanceof ApiError) throw e.toReconcileError();
    if (!containUnexpected) throw e;
    const stack = e instanceof Error ? (e.stack ?? String(e)) : String(e);
    backend().log("error", `reconcile of ${key} threw: ${stack}`, []);
    throw ReconcileError.of(e) as TransientError;
  } finally {
    ctx.close();
  }
  if (result === undefined) return Action.done();
  if (!(result instanceof Action)) throw new PermanentError(`reconcile returned ${typeof result}, not an Action`);
  return result;
}
