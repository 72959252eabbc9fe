// A hostile reconciler in TypeScript: the Rust `hostile` plugin's attacks
// that a JavaScript guest makes in its own way, chosen by the key's name, so
// that tests can show the host holds them as it holds a compiled guest's:
// - `output-flood`: 64 MiB to stdout in 64 KiB lines (console.log ends
//   every write with a newline), then 100,000 short lines;
// - `huge-error`: fails (transient) with an 8 MiB error message;
// - `deep-json`: creates its ConfigMap, and merge- and JSON-patches it, with
//   a value nested 100,000 levels deep; succeeds only if the host refused
//   all three as `invalid`;
// - `host-call-flood`: `kube` gets in a loop until the host stops it;
// - anything else: labels its ConfigMap `wasmctrl.dev/hostile: reconciled`.
/// <reference path="../../../../guest-sdk-js/src/wit-imports.d.ts" />
import * as kube from "wasmctrl:reconciler/kube@0.1.3";

import {
  Action,
  Api,
  ApiError,
  kinds,
  log,
  Metadata,
  NotFound,
  type ObjectKey,
  Patch,
  PermanentError,
  type Reconciler,
  TransientError,
} from "@wasmctrl/sdk";
import { exportReconciler } from "@wasmctrl/sdk/component";

const DEPTH = 100_000;

// StarlingMonkey's console writes to the component's stdout; the SDK's
// type-check leaves out every environment's globals.
declare const console: { log(...data: unknown[]): void };

function outputFlood(): Action {
  const chunk = "x".repeat(64 << 10);
  for (let i = 0; i < (64 << 20) / chunk.length; i++) console.log(chunk);
  for (let i = 0; i < 100_000; i++) console.log(`line ${i}`);
  return Action.done();
}

/** The `api-error` case an import threw (componentize-js throws the variant itself). */
function codeOf(e: unknown): string {
  const payload = (e !== null && typeof e === "object" && "payload" in e ? (e as { payload: unknown }).payload : e) as
    | { tag?: unknown }
    | undefined;
  return payload && typeof payload === "object" && typeof payload.tag === "string" ? payload.tag : String(e);
}

function deepJson(namespace: string, name: string): Action {
  // Text, not an object: JSON.stringify of an array this deep would run out
  // of stack, and the SDK's Api only sends what it serialized itself, hence
  // the host's import.
  const deep = "[".repeat(DEPTH) + "]".repeat(DEPTH);
  const gvk = { group: "", version: "v1", kind: "ConfigMap" };
  const attempts: [string, () => unknown][] = [
    [
      "create",
      () =>
        kube.create(
          gvk,
          namespace,
          `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"${name}"},"data":{"x":${deep}}}`,
        ),
    ],
    ["merge patch", () => kube.patch(gvk, namespace, name, { tag: "merge", val: `{"data":{"x":${deep}}}` })],
    [
      "json patch",
      () => kube.patch(gvk, namespace, name, { tag: "json", val: `[{"op":"add","path":"/data/x","value":${deep}}]` }),
    ],
  ];
  const escaped: string[] = [];
  for (const [what, attempt] of attempts) {
    try {
      attempt();
      escaped.push(`${what}: accepted`);
    } catch (e) {
      const code = codeOf(e);
      if (code !== "invalid") escaped.push(`${what}: ${code}`);
    }
  }
  if (escaped.length > 0) throw new PermanentError(`not refused as invalid: ${escaped.join("; ")}`);
  log.info("every deep body was refused");
  return Action.done();
}

class Hostile implements Reconciler {
  metadata(): Metadata {
    return new Metadata("hostile-ts", "0.1.0", kinds.ConfigMap).permission(
      "",
      ["configmaps"],
      ["get", "list", "watch", "patch", "create"],
    );
  }

  reconcile(key: ObjectKey): Action {
    const namespace = key.requireNamespace();
    const configmaps = Api.namespaced(kinds.ConfigMap, namespace);
    const name = key.name;
    if (name === "output-flood") return outputFlood();
    if (name === "huge-error") throw new TransientError("e".repeat(8 << 20));
    if (name === "deep-json") return deepJson(namespace, name);
    if (name === "host-call-flood") {
      for (;;) {
        try {
          configmaps.get(name);
        } catch (e) {
          if (!(e instanceof ApiError)) throw e;
        }
      }
    }
    try {
      configmaps.patch(name, Patch.merge({ metadata: { labels: { "wasmctrl.dev/hostile": "reconciled" } } }));
    } catch (e) {
      if (!(e instanceof NotFound)) throw e;
    }
    return Action.done();
  }
}

export const { metadata, reconcile } = exportReconciler(new Hostile());
