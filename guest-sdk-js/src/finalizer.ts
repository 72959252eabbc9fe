/** The finalizer helper: clean up before an object goes away (kube-runtime's `finalizer()`, for one reconcile). */
import { Action } from "./action.js";
import { type Api, Patch, PatchOp } from "./api.js";
import { ApiError, Conflict, Invalid, NotFound, type ReconcileError, TransientError } from "./errors.js";
import { isDeleting, type KubeObject, nameOf } from "./objects.js";

/**
 * What the reconcile is asked to do with the object: `apply` while it lives
 * and carries the finalizer (bring the world to its desired state;
 * idempotent), `cleanup` once it is being deleted (undo what lives outside
 * its garbage-collected dependents; idempotent too: a failed removal runs it
 * again).
 */
export type FinalizerEvent<T> = { type: "apply"; object: T } | { type: "cleanup"; object: T };

/** @internal What {@link finalizer} does for an object, and the JSON patch it sends. */
export type Plan = { step: "add" | "cleanup"; ops: PatchOp[] } | { step: "apply" | "nothing" };

/** @internal */
export function plan(obj: KubeObject, name: string): Plan {
  const current = obj.metadata?.finalizers;
  const present = current ?? [];
  const deleting = isDeleting(obj);
  if (!deleting && present.includes(name)) return { step: "apply" };
  if (!deleting) {
    if (current === undefined || current === null) {
      // null also matches the absent key: the first add wins, a second
      // concurrent add fails its test.
      return { step: "add", ops: [PatchOp.test("/metadata/finalizers", null), PatchOp.add("/metadata/finalizers", [name])] };
    }
    return { step: "add", ops: [PatchOp.test("/metadata/finalizers", current), PatchOp.add("/metadata/finalizers/-", name)] };
  }
  const index = present.indexOf(name);
  if (index >= 0) {
    const path = `/metadata/finalizers/${index}`;
    return { step: "cleanup", ops: [PatchOp.test(path, name), PatchOp.remove(path)] };
  }
  return { step: "nothing" };
}

/**
 * Runs `reconcile` for `obj` under the finalizer `name`:
 *
 * - live object without the finalizer → adds it, then `apply` with the patched object;
 * - live object with it → `apply`;
 * - object being deleted with it → `cleanup`; if that returns, removes the
 *   finalizer and returns cleanup's action;
 * - object being deleted without it → nothing; `Action.done()`.
 *
 * Conflict safety: both finalizer writes are JSON patches guarded by a
 * `test` operation: the add tests that `metadata.finalizers` is still what
 * `obj` showed, the removal that our entry is still at the index `obj`
 * showed. A concurrent edit makes the patch fail rather than clobber the
 * other writer; that failure (`Invalid` for a failed test, `Conflict` for a
 * stale object) is thrown as a {@link TransientError}, so the key is retried
 * against a fresh read. `NotFound` while removing means the object is
 * already gone: success.
 */
export function finalizer<T extends KubeObject>(
  api: Api<T>,
  name: string,
  obj: T,
  reconcile: (event: FinalizerEvent<T>) => Action | void,
): Action {
  const objectName = nameOf(obj);
  const p = plan(obj, name);
  switch (p.step) {
    case "add": {
      let patched: T;
      try {
        patched = api.patch(objectName, Patch.json(p.ops));
      } catch (e) {
        if (e instanceof NotFound) return Action.done();
        throw lostRace("add", name, e);
      }
      return reconcile({ type: "apply", object: patched }) ?? Action.done();
    }
    case "apply":
      return reconcile({ type: "apply", object: obj }) ?? Action.done();
    case "cleanup": {
      const action = reconcile({ type: "cleanup", object: obj }) ?? Action.done();
      try {
        api.patch(objectName, Patch.json(p.ops));
      } catch (e) {
        if (!(e instanceof NotFound)) throw lostRace("remove", name, e);
      }
      return action;
    }
    case "nothing":
      return Action.done();
  }
}

function lostRace(what: string, finalizerName: string, e: unknown): ReconcileError | unknown {
  if (e instanceof Invalid || e instanceof Conflict) {
    return new TransientError(
      `could not ${what} finalizer ${JSON.stringify(finalizerName)}: the object changed concurrently (${e.detail})`,
    );
  }
  return e instanceof ApiError ? e.toReconcileError() : e;
}
