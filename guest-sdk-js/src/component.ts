/**
 * The component side: export a {@link Reconciler} as the
 * `wasmctrl:reconciler` world's `metadata` and `reconcile`, over the host's
 * imports. Import this only from the plugin's entry module (the one
 * `wasmctrl build` componentizes); unit tests import the reconciler itself.
 */
/// <reference path="./wit-imports.d.ts" />
import * as context from "wasmctrl:reconciler/context@0.1.3";
import * as kube from "wasmctrl:reconciler/kube@0.1.3";
import * as secrets from "wasmctrl:reconciler/secrets@0.1.3";
import type * as wit from "wasmctrl:reconciler/types@0.1.3";
import * as outgoingHandler from "wasi:http/outgoing-handler@0.2.12";
import * as httpTypes from "wasi:http/types@0.2.12";

import * as admission from "./admission.js";
import { apiErrorOf, ReconcileError } from "./errors.js";
import { type Backend, install, type WirePatch } from "./host.js";
import { HttpError, type WireRequest, type WireResponse } from "./http.js";
import { type Gvk, ObjectKey } from "./metadata.js";
import { metadataOf, type Reconciler, run } from "./reconciler.js";
import * as utf8 from "./utf8.js";

function gvk(k: Gvk): wit.Gvk {
  return { group: k.group, version: k.version, kind: k.kind };
}

function objectPatch(p: WirePatch): kube.ObjectPatch {
  if (p.type === "apply") return { tag: "apply", val: { body: p.body, fieldManager: p.fieldManager, force: p.force } };
  return { tag: p.type, val: p.body };
}

/**
 * The variant a failed import threw (an `api-error`, an `error-code`, a
 * `stream-error`): componentize-js throws the variant itself, jco wraps it
 * in `payload`. Undefined when `e` is not a variant.
 */
function variantOf(e: unknown): { tag: string; val?: unknown } | undefined {
  const payload = e !== null && typeof e === "object" && "payload" in e ? (e as { payload: unknown }).payload : e;
  if (payload !== null && typeof payload === "object" && "tag" in payload && typeof payload.tag === "string") {
    return payload as { tag: string; val?: unknown };
  }
  return undefined;
}

/** Calls an import of the `kube` or `secrets` interface, throwing its `api-error` as an {@link ApiError}. */
function call<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    const payload = variantOf(e);
    if (payload !== undefined) {
      throw apiErrorOf(payload.tag, String(payload.val ?? ""));
    }
    throw e;
  }
}

/**
 * The symbol componentize-js's bindings drop a resource handle by:
 * `Symbol.dispose` where the engine has it (not in the ES library a
 * plugin's tsconfig names), else `Symbol.for("dispose")`.
 */
const DISPOSE: symbol = (Symbol as { dispose?: symbol }).dispose ?? Symbol.for("dispose");

/** Drops a resource handle now, rather than whenever the collector runs. */
function drop(resource: object): void {
  (resource as { [key: symbol]: (() => void) | undefined })[DISPOSE]?.();
}

/** Bytes one `blocking-write-and-flush` may take (the wasi:io contract). */
const WRITE_CHUNK = 4096;
const READ_CHUNK = 64n << 10n;

const METHODS = ["get", "head", "post", "put", "delete", "connect", "options", "trace", "patch"] as const;

function method(name: string): httpTypes.Method {
  const lower = name.toLowerCase() as (typeof METHODS)[number];
  return METHODS.includes(lower) && name === name.toUpperCase() ? { tag: lower } : { tag: "other", val: name };
}

/** What a wasi:http call threw, as text: its `error-code` where it has one. */
function reason(e: unknown): string {
  const variant = variantOf(e);
  if (variant !== undefined) {
    return variant.val === undefined ? variant.tag : `${variant.tag}: ${JSON.stringify(variant.val)}`;
  }
  return e instanceof Error ? e.message : String(e);
}

function failed(what: string, e: unknown): HttpError {
  return new HttpError(`HTTP request failed: ${what}: ${reason(e)}`);
}

/** `http.send` inside a component: built, sent and read through `wasi:http`. */
function httpSend(request: WireRequest): WireResponse {
  const parts = /^(https?):\/\/([^/?#]*)([^#]*)/.exec(request.url);
  if (parts === null) throw new HttpError(`bad URL: ${JSON.stringify(request.url)}`);
  const [, scheme, authority, rest] = parts;
  const pathWithQuery = rest === "" ? "/" : rest!.startsWith("?") ? `/${rest}` : rest!;
  const what = `${request.method} ${request.url}`;
  let outgoing: httpTypes.OutgoingRequest;
  try {
    outgoing = new httpTypes.OutgoingRequest(
      httpTypes.Fields.fromList(request.headers.map(([n, v]) => [n, utf8.encode(v)])),
    );
  } catch (e) {
    throw failed("headers", e);
  }
  try {
    outgoing.setMethod(method(request.method));
    outgoing.setScheme(scheme === "https" ? { tag: "HTTPS" } : { tag: "HTTP" });
    outgoing.setAuthority(authority);
    outgoing.setPathWithQuery(pathWithQuery);
  } catch (e) {
    throw failed(what, e);
  }
  const body = outgoing.body();
  let future: httpTypes.FutureIncomingResponse;
  try {
    future = outgoingHandler.handle(outgoing, undefined);
  } catch (e) {
    throw failed(what, e);
  }
  try {
    const stream = body.write();
    for (let i = 0; i < request.body.length; i += WRITE_CHUNK) {
      stream.blockingWriteAndFlush(request.body.subarray(i, i + WRITE_CHUNK));
    }
    // The stream is the body's child: it goes before the body finishes.
    drop(stream);
    httpTypes.OutgoingBody.finish(body, undefined);
  } catch (e) {
    throw failed("sending the body", e);
  }
  const pollable = future.subscribe();
  pollable.block();
  drop(pollable);
  const got = future.get();
  if (got === undefined || got.tag === "err" || got.val.tag === "err") {
    const detail = got === undefined ? "no answer" : got.tag === "err" ? "answer already taken" : reason(got.val.val);
    throw new HttpError(`HTTP request failed: ${what}: ${detail}`);
  }
  const incoming = got.val.val;
  const status = incoming.status();
  const fields = incoming.headers();
  const headers = fields.entries();
  drop(fields);
  const incomingBody = incoming.consume();
  const input = incomingBody.stream();
  const chunks: Uint8Array[] = [];
  let length = 0;
  for (;;) {
    let chunk: Uint8Array;
    try {
      chunk = input.blockingRead(READ_CHUNK);
    } catch (e) {
      if (variantOf(e)?.tag === "closed") break;
      throw failed("reading the body", e);
    }
    chunks.push(chunk);
    length += chunk.length;
  }
  drop(input);
  drop(incomingBody);
  drop(incoming);
  drop(future);
  const whole = new Uint8Array(length);
  let at = 0;
  for (const c of chunks) {
    whole.set(c, at);
    at += c.length;
  }
  return { status, headers, body: whole };
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
  httpSend,
};

/**
 * The world's exports, as componentize-js expects them from the entry
 * module (typed loosely here so that the SDK's declarations do not depend on
 * the WIT modules, which only exist inside a component).
 */
export interface WorldExports {
  metadata(): unknown;
  reconcile(key: { namespace?: string; name: string }): unknown;
  /** The `admission-reconciler` world's exports: export them all, with
   * `metadata` and `reconcile`, and `wasmctrl build` builds against that
   * world (a plugin without a validator or defaulter declares no webhook). */
  outbound(): unknown;
  webhooks(): unknown;
  validate(request: string): unknown;
  mutate(request: string): unknown;
}

/** The admission webhooks a plugin serves besides reconciling. */
export interface Admission {
  validator?: admission.Validator;
  defaulter?: admission.Defaulter;
}

function webhookToWit(kind: "validating" | "mutating", w: admission.Webhook): unknown {
  return {
    kind,
    rules: w.rules.map((r) => ({
      operations: [...r.operations],
      groups: [r.group],
      versions: [r.version],
      resources: [...r.resources],
      scope: "any",
    })),
    failurePolicy: w.failurePolicyIgnore ? "ignore" : "fail",
    timeoutSeconds: w.timeout,
    namespaceSelector: w.namespaceSelectorText,
    objectSelector: w.objectSelectorText,
  };
}

function verdictToWit(v: admission.Verdict): unknown {
  return {
    allowed: v.allowed,
    code: v.code,
    message: v.message,
    causes: v.causes.map((c) => ({ field: c.field, reason: c.reason, message: c.message })),
    warnings: [...v.warnings],
    auditAnnotations: [],
    patched: v.patched,
  };
}

function notServed(exportName: string): admission.Verdict {
  return {
    allowed: false,
    code: 500,
    message: `this plugin declares no webhook that \`${exportName}\` answers`,
    causes: [],
    warnings: [],
  };
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
export function exportReconciler(reconciler: Reconciler, reviewers: Admission = {}): WorldExports {
  const { validator, defaulter } = reviewers;
  return {
    outbound(): unknown[] {
      // TypeScript plugins declare no destinations: the host config's
      // `outbound` grant alone decides what is sent.
      return [];
    },
    webhooks(): unknown[] {
      install(witBackend);
      const declared: unknown[] = [];
      if (validator) declared.push(webhookToWit("validating", admission.webhookOf(validator)));
      if (defaulter) declared.push(webhookToWit("mutating", admission.webhookOf(defaulter)));
      return declared;
    },
    validate(request: string): unknown {
      install(witBackend);
      return verdictToWit(validator ? admission.validate(validator, request) : notServed("validate"));
    },
    mutate(request: string): unknown {
      install(witBackend);
      return verdictToWit(defaulter ? admission.mutate(defaulter, request) : notServed("mutate"));
    },
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
