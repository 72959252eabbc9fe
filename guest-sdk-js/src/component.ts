/**
 * The component side: export a {@link Reconciler} as the
 * `wasmctrl:reconciler` world's `metadata` and `reconcile`, over the host's
 * imports. Import this only from the plugin's entry module (the one
 * `wasmctrl build` componentizes); unit tests import the reconciler itself.
 */
/// <reference path="./wit-imports.d.ts" />
import * as context from "wasmctrl:reconciler/context@0.1.2";
import * as kube from "wasmctrl:reconciler/kube@0.1.2";
import * as secrets from "wasmctrl:reconciler/secrets@0.1.2";
import type * as wit from "wasmctrl:reconciler/types@0.1.2";

import { apiErrorOf, ReconcileError } from "./errors.js";
import { type Backend, install, type WirePatch } from "./host.js";
import { type Gvk, ObjectKey } from "./metadata.js";
import { metadataOf, type Reconciler, run } from "./reconciler.js";

function gvk(k: Gvk): wit.Gvk {
  return { group: k.group, version: k.version, kind: k.kind };
}

function objectPatch(p: WirePatch): kube.ObjectPatch {
  if (p.type === "apply") return { tag: "apply", val: { body: p.body, fieldManager: p.fieldManager, force: p.force } };
  return { tag: p.type, val: p.body };
}

/** The `api-error` an import threw: componentize-js throws the variant, jco wraps it in `payload`. */
function call<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    const payload = (e !== null && typeof e === "object" && "payload" in e ? (e as { payload: unknown }).payload : e) as
      | { tag?: unknown; val?: unknown }
      | undefined;
    if (payload && typeof payload === "object" && typeof payload.tag === "string") {
      throw apiErrorOf(payload.tag, String(payload.val ?? ""));
    }
    throw e;
  }
}

const witBackend: Backend = {
  get: (k, ns, name) => call(() => kube.get(gvk(k), ns, name)),
  list: (k, ns, selector) => call(() => kube.list(gvk(k), ns, selector)),
  create: (k, ns, body) => call(() => kube.create(gvk(k), ns, body)),
  replace: (k, ns, name, body) => call(() => kube.replace(gvk(k), ns, name, body)),
  patch: (k, ns, name, p) => call(() => kube.patch(gvk(k), ns, name, objectPatch(p))),
  replaceStatus: (k, ns, name, body) => call(() => kube.replaceStatus(gvk(k), ns, name, body)),
  patchStatus: (k, ns, name, p) => call(() => kube.patchStatus(gvk(k), ns, name, objectPatch(p))),
  delete: (k, ns, name) => call(() => kube.delete(gvk(k), ns, name)),
  recordEvent: (e) =>
    call(() =>
      kube.recordEvent({
        regardingKind: gvk(e.regardingKind),
        regardingNamespace: e.regardingNamespace,
        regardingName: e.regardingName,
        type: e.type === "Warning" ? "warning" : "normal",
        reason: e.reason,
        action: e.action,
        note: e.note,
      }),
    ),
  deadlineRemainingMs: () => Number(context.deadlineRemainingMs()),
  cancelled: () => context.cancelled(),
  attempt: () => context.attempt(),
  settings: () => context.settings(),
  log: (level, message, fields) => context.log(level, message, fields),
  logEnabled: (level) => context.logEnabled(level),
  reveal: (name) => call(() => secrets.reveal(name)),
};

/**
 * The world's exports, as componentize-js expects them from the entry
 * module (typed loosely here so that the SDK's declarations do not depend on
 * the WIT modules, which only exist inside a component).
 */
export interface WorldExports {
  metadata(): unknown;
  reconcile(key: { namespace?: string; name: string }): unknown;
}

/**
 * Exports `reconciler` as the component's `metadata` and `reconcile`. The
 * entry module re-exports the result under those names:
 *
 * ```ts
 * export const { metadata, reconcile } = exportReconciler(new Hello());
 * ```
 *
 * The reconciler is built when the component is (componentize-js
 * snapshots the initialised engine): its constructor must not call the host.
 */
export function exportReconciler(reconciler: Reconciler): WorldExports {
  return {
    metadata(): wit.PluginMetadata {
      install(witBackend);
      const m = metadataOf(reconciler);
      return {
        name: m.name,
        version: m.version,
        for: gvk(m.for),
        owns: m.owned.map(gvk),
        watches: m.watched.map((w) => ({ kind: gvk(w.kind), mapping: w.mapping })),
        permissions: m.permissions.map((p) => ({ group: p.group, resources: [...p.resources], verbs: [...p.verbs] })),
      };
    },
    reconcile(key: wit.ObjectKey): wit.Action {
      install(witBackend);
      try {
        const action = run(reconciler, new ObjectKey(key.namespace, key.name), true);
        return { requeue: action.requeue, requeueAfterMs: BigInt(action.requeueAfterMs) };
      } catch (e) {
        const error = ReconcileError.of(e);
        // componentize-js turns a thrown value into the `result`'s error.
        const thrown: wit.ReconcileError = { tag: error.permanent ? "permanent" : "transient", val: error.detail };
        throw thrown;
      }
    },
  };
}
