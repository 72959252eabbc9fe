/**
 * Admission webhooks: validate and default objects before the API server
 * stores them, in the spirit of controller-runtime's `CustomValidator` and
 * `CustomDefaulter`.
 *
 * A plugin implements {@link Validator} and/or {@link Defaulter} for one
 * kind and hands them to `exportReconciler`, whose result the entry module
 * exports in full:
 *
 * ```ts
 * export const { metadata, reconcile, outbound, webhooks, validate, mutate } =
 *   exportReconciler(new WebAppReconciler(), { validator: new WebAppAdmission(), defaulter: new WebAppAdmission() });
 * ```
 *
 * The host serves them as webhooks for the rules of `webhook()`, which must
 * stay within the plugin's permissions (reviewing an object is reading
 * it). During a review the host API is read-only. A defaulter changes the
 * object in place; the host computes the patch and refuses a change of the
 * object's name, namespace, uid, kind or apiVersion.
 */

import type { Kind } from "./metadata.js";

/** An operation a webhook reviews. */
export type Operation = "CREATE" | "UPDATE" | "DELETE" | "CONNECT";

const OPERATIONS: readonly string[] = ["CREATE", "UPDATE", "DELETE", "CONNECT"];

/** One rule of a webhook: operations on resources of a group and version. */
export interface WebhookRule {
  operations: Operation[];
  group: string;
  version: string;
  resources: string[];
}

/** Which requests a webhook reviews, and how the API server treats it. */
export class Webhook {
  readonly rules: WebhookRule[] = [];
  failurePolicyIgnore = false;
  timeout = 0;
  namespaceSelectorText: string | undefined;
  objectSelectorText: string | undefined;

  /** Reviews `operations` (default: creates and updates) of `kind`. */
  static forKind(kind: Kind, operations: Operation[] = ["CREATE", "UPDATE"]): Webhook {
    return new Webhook().rule(kind.group, kind.version, [kind.plural], operations);
  }

  /** Also reviews `operations` on `resources` of `group`/`version`. */
  rule(group: string, version: string, resources: string[], operations: Operation[]): Webhook {
    this.rules.push({ operations: [...operations], group, version, resources: [...resources] });
    return this;
  }

  /** failurePolicy `Ignore`: allow (with a warning) when the plugin cannot answer. */
  ignoreFailures(): Webhook {
    this.failurePolicyIgnore = true;
    return this;
  }

  /** The API server's budget for one review, 1–30 s (default 10). */
  timeoutSeconds(seconds: number): Webhook {
    this.timeout = seconds;
    return this;
  }

  namespaceSelector(selector: string): Webhook {
    this.namespaceSelectorText = selector;
    return this;
  }

  objectSelector(selector: string): Webhook {
    this.objectSelectorText = selector;
    return this;
  }
}

/** Who made the request under review. */
export interface UserInfo {
  username: string;
  groups: string[];
}

/** A field a denial is about (an `Invalid` status cause). */
export interface Cause {
  field: string;
  reason: string;
  message: string;
}

/** A denied request: 403 unless another code (400–599) is given. */
export class Denied extends Error {
  constructor(
    message: string,
    readonly code = 403,
    readonly causes: Cause[] = [],
  ) {
    super(message);
    this.name = "Denied";
  }
}

/** The request under review (AdmissionReview v1's `request`). */
export class AdmissionRequest {
  constructor(
    readonly uid: string,
    readonly operation: Operation,
    readonly name: string,
    readonly namespace: string | undefined,
    readonly subResource: string | undefined,
    readonly user: UserInfo,
    readonly dryRun: boolean,
    /** The object as it would be stored (null for a delete). */
    readonly object: any,
    /** The object as it is stored now (null for a create). */
    readonly oldObject: any,
  ) {}

  static fromJson(text: string): AdmissionRequest {
    let r: any;
    try {
      r = JSON.parse(text);
    } catch (e) {
      throw new Denied(`the admission request is not JSON: ${String(e)}`, 400);
    }
    if (!OPERATIONS.includes(r.operation)) throw new Denied(`unknown operation ${JSON.stringify(r.operation)}`, 400);
    const user = r.userInfo ?? {};
    return new AdmissionRequest(
      String(r.uid ?? ""),
      r.operation,
      String(r.name ?? ""),
      r.namespace || undefined,
      r.subResource || undefined,
      { username: String(user.username ?? ""), groups: Array.isArray(user.groups) ? user.groups.map(String) : [] },
      Boolean(r.dryRun),
      r.object ?? null,
      r.oldObject ?? null,
    );
  }
}

/**
 * Field errors, worded as the API server words its own validation:
 * `WebApp.demo.wasmctrl.dev "web" is invalid: spec.replicas: Invalid value:
 * 51: must be between 0 and 50` (status 422, one cause each).
 */
export class FieldErrors {
  readonly causes: Cause[] = [];

  invalid(field: string, value: unknown, detail: string): void {
    this.causes.push({ field, reason: "FieldValueInvalid", message: `Invalid value: ${JSON.stringify(value)}: ${detail}` });
  }

  required(field: string, detail = ""): void {
    this.causes.push({ field, reason: "FieldValueRequired", message: detail ? `Required value: ${detail}` : "Required value" });
  }

  forbidden(field: string, detail: string): void {
    this.causes.push({ field, reason: "FieldValueForbidden", message: `Forbidden: ${detail}` });
  }

  notSupported(field: string, value: string, supported: string[]): void {
    const values = supported.map((s) => JSON.stringify(s)).join(", ");
    this.causes.push({
      field,
      reason: "FieldValueNotSupported",
      message: `Unsupported value: ${JSON.stringify(value)}: supported values: ${values}`,
    });
  }

  get length(): number {
    return this.causes.length;
  }

  /** Throws the {@link Denied} of `obj` when there are errors. */
  throwIfAny(kind: Kind, obj: any): void {
    if (this.causes.length === 0) return;
    const qualified = kind.group ? `${kind.kind}.${kind.group}` : kind.kind;
    const errors = this.causes.map((c) => `${c.field}: ${c.message}`);
    const shown = errors.length === 1 ? errors[0] : `[${errors.join(", ")}]`;
    const name = obj?.metadata?.name ?? "";
    throw new Denied(`${qualified} ${JSON.stringify(name)} is invalid: ${shown}`, 422, [...this.causes]);
  }
}

/** Validates objects of `kind` (a validating webhook). */
export interface Validator {
  readonly kind: Kind;
  /** Which requests to review; default: creates and updates of `kind`. */
  webhook?(): Webhook;
  /** Warnings, or throw {@link Denied}. */
  validateCreate(obj: any, request: AdmissionRequest): string[];
  /** Default: the new object is validated as on create. */
  validateUpdate?(old: any, obj: any, request: AdmissionRequest): string[];
  /** Default: allowed. */
  validateDelete?(obj: any, request: AdmissionRequest): string[];
}

/** Sets defaults on objects of `kind` (a mutating webhook). */
export interface Defaulter {
  readonly kind: Kind;
  /** Which requests to review; default: creates and updates of `kind`. */
  webhook?(): Webhook;
  /** Changes `obj` in place, or throw {@link Denied}. */
  default(obj: any, request: AdmissionRequest): void;
}

/** What a review answers (the WIT `admission-response`). */
export interface Verdict {
  allowed: boolean;
  code: number;
  message: string;
  causes: Cause[];
  warnings: string[];
  patched?: string;
}

function denied(e: unknown): Verdict {
  if (e instanceof Denied) return { allowed: false, code: e.code, message: e.message, causes: e.causes, warnings: [] };
  // An unexpected exception is a 500 denial (a trap is the failure policy's).
  const message = e instanceof Error ? `unexpected ${e.name}: ${e.message}` : `unexpected ${String(e)}`;
  return { allowed: false, code: 500, message, causes: [], warnings: [] };
}

/** The webhook a validator or defaulter declares. */
export function webhookOf(reviewer: Validator | Defaulter): Webhook {
  return reviewer.webhook ? reviewer.webhook() : Webhook.forKind(reviewer.kind);
}

/** What `validator` answers to one request. */
export function validate(validator: Validator, requestJson: string): Verdict {
  try {
    const request = AdmissionRequest.fromJson(requestJson);
    let warnings: string[];
    if (request.operation === "UPDATE") {
      warnings = validator.validateUpdate
        ? validator.validateUpdate(request.oldObject, request.object, request)
        : validator.validateCreate(request.object, request);
    } else if (request.operation === "DELETE") {
      warnings = validator.validateDelete ? validator.validateDelete(request.oldObject, request) : [];
    } else {
      warnings = validator.validateCreate(request.object, request);
    }
    return { allowed: true, code: 0, message: "", causes: [], warnings: [...(warnings ?? [])] };
  } catch (e) {
    return denied(e);
  }
}

/** What `defaulter` answers to one request: the object as it should be
 * admitted, where the defaulter changed it. */
export function mutate(defaulter: Defaulter, requestJson: string): Verdict {
  try {
    const request = AdmissionRequest.fromJson(requestJson);
    const allowed: Verdict = { allowed: true, code: 0, message: "", causes: [], warnings: [] };
    if (request.object === null || typeof request.object !== "object") return allowed;
    const before = JSON.stringify(request.object);
    defaulter.default(request.object, request);
    const after = JSON.stringify(request.object);
    return after === before ? allowed : { ...allowed, patched: after };
  } catch (e) {
    return denied(e);
  }
}
