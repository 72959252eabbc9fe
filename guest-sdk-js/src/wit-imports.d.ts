// The host's imports as componentize-js presents them to a component of the
// `wasmctrl:reconciler@0.1.3` `http-reconciler` world (wit/http.wit: the
// reconciler world and `wasi:http/outgoing-handler`), in jco's type
// conventions: records are objects with camelCase fields, variants
// `{ tag, val }`, enums strings, options `T | undefined`, u64 `bigint`, and a
// `result` import returns its ok value and throws its error. Only
// `component.ts` imports these modules; the rest of the SDK goes through
// `host.ts`, so it also runs natively under the testing fake.

declare module "wasmctrl:reconciler/types@0.1.3" {
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

declare module "wasmctrl:reconciler/context@0.1.3" {
  import type { LogLevel } from "wasmctrl:reconciler/types@0.1.3";
  export function deadlineRemainingMs(): bigint;
  export function cancelled(): boolean;
  export function attempt(): number;
  export function settings(): string;
  export function log(level: LogLevel, message: string, fields: Array<[string, string]>): void;
  export function logEnabled(level: LogLevel): boolean;
}

declare module "wasmctrl:reconciler/kube@0.1.3" {
  import type { Gvk } from "wasmctrl:reconciler/types@0.1.3";
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

declare module "wasmctrl:reconciler/secrets@0.1.3" {
  export function reveal(name: string): string;
}

// The parts of WASI 0.2.12 `wasi:http` (wit/deps, the `http-reconciler`
// world) that `component.ts` uses. Resources are classes; `component.ts`
// drops a handle through the bindings' dispose symbol, which
// `outgoing-body.finish` needs of the body's stream.

declare module "wasi:io/poll@0.2.12" {
  export class Pollable {
    block(): void;
  }
}

declare module "wasi:io/streams@0.2.12" {
  export type StreamError = { tag: "last-operation-failed"; val: unknown } | { tag: "closed" };
  export class InputStream {
    blockingRead(len: bigint): Uint8Array;
  }
  export class OutputStream {
    blockingWriteAndFlush(contents: Uint8Array): void;
  }
}

declare module "wasi:http/types@0.2.12" {
  import type { Pollable } from "wasi:io/poll@0.2.12";
  import type { InputStream, OutputStream } from "wasi:io/streams@0.2.12";
  export type Method =
    | { tag: "get" }
    | { tag: "head" }
    | { tag: "post" }
    | { tag: "put" }
    | { tag: "delete" }
    | { tag: "connect" }
    | { tag: "options" }
    | { tag: "trace" }
    | { tag: "patch" }
    | { tag: "other"; val: string };
  export type Scheme = { tag: "HTTP" } | { tag: "HTTPS" } | { tag: "other"; val: string };
  /** The `error-code` variant: a tag, and for some cases a payload. */
  export type ErrorCode = { tag: string; val?: unknown };
  export type Result<T, E> = { tag: "ok"; val: T } | { tag: "err"; val: E };
  export class Fields {
    static fromList(entries: Array<[string, Uint8Array]>): Fields;
    entries(): Array<[string, Uint8Array]>;
  }
  export class OutgoingRequest {
    constructor(headers: Fields);
    body(): OutgoingBody;
    setMethod(method: Method): void;
    setPathWithQuery(pathWithQuery: string | undefined): void;
    setScheme(scheme: Scheme | undefined): void;
    setAuthority(authority: string | undefined): void;
  }
  export class OutgoingBody {
    write(): OutputStream;
    static finish(body: OutgoingBody, trailers: Fields | undefined): void;
  }
  export class IncomingResponse {
    status(): number;
    headers(): Fields;
    consume(): IncomingBody;
  }
  export class IncomingBody {
    stream(): InputStream;
  }
  export class FutureIncomingResponse {
    subscribe(): Pollable;
    get(): Result<Result<IncomingResponse, ErrorCode>, void> | undefined;
  }
}

declare module "wasi:http/outgoing-handler@0.2.12" {
  import type { ErrorCode, FutureIncomingResponse, OutgoingRequest } from "wasi:http/types@0.2.12";
  export type { ErrorCode };
  export function handle(request: OutgoingRequest, options: undefined): FutureIncomingResponse;
}
