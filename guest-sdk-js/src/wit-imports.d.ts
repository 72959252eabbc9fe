// The host's imports as componentize-js presents them to a component of the
// `wasmctrl:reconciler@0.1.2` world (wit/reconciler.wit), in jco's type
// conventions: records are objects with camelCase fields, variants
// `{ tag, val }`, enums strings, options `T | undefined`, u64 `bigint`, and a
// `result` import returns its ok value and throws its error. Only
// `component.ts` imports these modules; the rest of the SDK goes through
// `host.ts`, so it also runs natively under the testing fake.

declare module "wasmctrl:reconciler/types@0.1.2" {
  export interface ObjectKey {
    namespace?: string;
    name: string;
  }
  export interface Gvk {
    group: string;
    version: string;
    kind: string;
  }
  export interface Action {
    requeue: boolean;
    requeueAfterMs: bigint;
  }
  export type ReconcileError = { tag: "transient"; val: string } | { tag: "permanent"; val: string };
  export type ApiError =
    | { tag: "not-found"; val: string }
    | { tag: "conflict"; val: string }
    | { tag: "already-exists"; val: string }
    | { tag: "forbidden"; val: string }
    | { tag: "invalid"; val: string }
    | { tag: "timeout"; val: string }
    | { tag: "unavailable"; val: string }
    | { tag: "other"; val: string };
  export type WatchMapping = { tag: "owner" } | { tag: "same-name" } | { tag: "label"; val: string };
  export interface Watch {
    kind: Gvk;
    mapping: WatchMapping;
  }
  export interface Permission {
    group: string;
    resources: Array<string>;
    verbs: Array<string>;
  }
  export interface PluginMetadata {
    name: string;
    version: string;
    for: Gvk;
    owns: Array<Gvk>;
    watches: Array<Watch>;
    permissions: Array<Permission>;
  }
  export type LogLevel = "trace" | "debug" | "info" | "warn" | "error";
}

declare module "wasmctrl:reconciler/context@0.1.2" {
  import type { LogLevel } from "wasmctrl:reconciler/types@0.1.2";
  export function deadlineRemainingMs(): bigint;
  export function cancelled(): boolean;
  export function attempt(): number;
  export function settings(): string;
  export function log(level: LogLevel, message: string, fields: Array<[string, string]>): void;
  export function logEnabled(level: LogLevel): boolean;
}

declare module "wasmctrl:reconciler/kube@0.1.2" {
  import type { Gvk } from "wasmctrl:reconciler/types@0.1.2";
  export interface ApplyPatch {
    body: string;
    fieldManager: string;
    force: boolean;
  }
  export type ObjectPatch =
    | { tag: "merge"; val: string }
    | { tag: "json"; val: string }
    | { tag: "apply"; val: ApplyPatch };
  export type EventType = "normal" | "warning";
  export interface Event {
    regardingKind: Gvk;
    regardingNamespace?: string;
    regardingName: string;
    type: EventType;
    reason: string;
    action: string;
    note: string;
  }
  export function get(kind: Gvk, namespace: string | undefined, name: string): string;
  export function list(kind: Gvk, namespace: string | undefined, labelSelector: string | undefined): Array<string>;
  export function create(kind: Gvk, namespace: string | undefined, object: string): string;
  export function replace(kind: Gvk, namespace: string | undefined, name: string, object: string): string;
  export function patch(kind: Gvk, namespace: string | undefined, name: string, patch: ObjectPatch): string;
  export function replaceStatus(kind: Gvk, namespace: string | undefined, name: string, object: string): string;
  export function patchStatus(kind: Gvk, namespace: string | undefined, name: string, patch: ObjectPatch): string;
  // `delete` is a keyword: jco names the export `delete` all the same
  // (`import { delete as del }` is valid), as it does `list`.
  export { del as delete };
  function del(kind: Gvk, namespace: string | undefined, name: string): void;
  export function recordEvent(event: Event): void;
}

declare module "wasmctrl:reconciler/secrets@0.1.2" {
  export function reveal(name: string): string;
}
