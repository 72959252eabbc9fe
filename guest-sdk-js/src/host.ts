/**
 * The seam between the SDK and the host's imports. Inside a component,
 * `@wasmctrl/sdk/component` installs the WIT imports; natively, the testing
 * `FakeCluster` installs itself. Every SDK call goes through
 * {@link backend}, so both see exactly the same JSON text.
 */
import type { WireRequest, WireResponse } from "./http.js";
import type { Gvk } from "./metadata.js";

/** A patch as the `kube` interface carries it (bodies are JSON text). */
export type WirePatch =
  | { type: "merge"; body: string }
  | { type: "json"; body: string }
  | { type: "apply"; body: string; fieldManager: string; force: boolean };

export interface WireEvent {
  regardingKind: Gvk;
  regardingNamespace: string | undefined;
  regardingName: string;
  type: "Normal" | "Warning";
  reason: string;
  action: string;
  note: string;
}

export type LogLevel = "trace" | "debug" | "info" | "warn" | "error";

/**
 * The host's `context` and `kube` interfaces. Failed `kube` calls throw
 * {@link ApiError} subclasses.
 */
export interface Backend {
  get(kind: Gvk, namespace: string | undefined, name: string): string;
  list(kind: Gvk, namespace: string | undefined, labelSelector: string | undefined): string[];
  create(kind: Gvk, namespace: string | undefined, body: string): string;
  replace(kind: Gvk, namespace: string | undefined, name: string, body: string): string;
  patch(kind: Gvk, namespace: string | undefined, name: string, patch: WirePatch): string;
  replaceStatus(kind: Gvk, namespace: string | undefined, name: string, body: string): string;
  patchStatus(kind: Gvk, namespace: string | undefined, name: string, patch: WirePatch): string;
  delete(kind: Gvk, namespace: string | undefined, name: string): void;
  recordEvent(event: WireEvent): void;
  deadlineRemainingMs(): number;
  cancelled(): boolean;
  attempt(): number;
  settings(): string;
  log(level: LogLevel, message: string, fields: [string, string][]): void;
  logEnabled(level: LogLevel): boolean;
  reveal(name: string): string;
  /** Sends a request through `wasi:http`; failures throw `HttpError`. */
  httpSend(request: WireRequest): WireResponse;
}

let current: Backend | undefined;

/** Routes every SDK call to `b` (undefined: none). */
export function install(b: Backend | undefined): void {
  current = b;
}

export function installed(): Backend | undefined {
  return current;
}

export function backend(): Backend {
  if (current === undefined) {
    throw new Error(
      "@wasmctrl/sdk: no host to talk to: this code runs outside a wasmctrl component " +
        "(export the reconciler with exportReconciler from @wasmctrl/sdk/component); " +
        "in unit tests, create a FakeCluster from @wasmctrl/sdk/testing first",
    );
  }
  return current;
}
