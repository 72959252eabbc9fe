/**
 * Errors: why a reconcile failed, and why a call to the API failed.
 *
 * A reconcile fails by throwing. {@link TransientError} is retried with
 * per-key exponential backoff; {@link PermanentError} is not retried and is
 * recorded as a terminal error until the object changes again. An
 * {@link ApiError} escaping `reconcile` counts as transient, except
 * `Invalid`, `Forbidden` and `Serialization`, which are permanent: retrying
 * the same call cannot help (the Rust SDK's `From<ApiError> for Error`).
 */

/** A failed reconcile; see {@link TransientError} and {@link PermanentError}. */
export abstract class ReconcileError extends Error {
  /** True if retrying cannot help. */
  abstract readonly permanent: boolean;

  constructor(readonly detail: string) {
    super(detail);
  }

  /**
   * The reconcile error an exception escaping `reconcile` becomes: itself,
   * an {@link ApiError} by the transient/permanent rule, or anything else as
   * transient.
   */
  static of(error: unknown): ReconcileError {
    if (error instanceof ReconcileError) return error;
    if (error instanceof ApiError) return error.toReconcileError();
    const name = error instanceof Error ? error.constructor.name : typeof error;
    const message = error instanceof Error ? error.message : String(error);
    return new TransientError(`unexpected ${name}: ${message}`);
  }
}

/** A failure worth retrying (a conflict, an unavailable API server, …). */
export class TransientError extends ReconcileError {
  readonly permanent = false;
  override readonly name = "TransientError";
}

/** A failure retrying cannot fix (an invalid spec, …). */
export class PermanentError extends ReconcileError {
  readonly permanent = true;
  override readonly name = "PermanentError";
}

/** The short names of the host's API errors (the WIT `api-error` cases). */
export type ApiErrorCode =
  | "not-found"
  | "conflict"
  | "already-exists"
  | "forbidden"
  | "invalid"
  | "timeout"
  | "unavailable"
  | "other"
  | "serialization";

/**
 * A failed call to the Kubernetes API through the host. Subclasses name the
 * cause; `code` is the short name the host's metrics use, `detail` the
 * human-readable text; `message` is `"<code>: <detail>"`.
 */
export abstract class ApiError extends Error {
  abstract readonly code: ApiErrorCode;
  /** Whether a reconcile failing with this error should not be retried. */
  readonly permanent: boolean = false;

  constructor(readonly detail: string) {
    super(detail);
  }

  override toString(): string {
    return `${this.code}: ${this.detail}`;
  }

  toReconcileError(): ReconcileError {
    return this.permanent ? new PermanentError(this.toString()) : new TransientError(this.toString());
  }
}

/**
 * The base of the API error class for `code`, named `name`; `permanent` as
 * for {@link ApiError.permanent}.
 */
function apiErrorClass<C extends ApiErrorCode, N extends string>(
  code: C,
  name: N,
  permanent = false,
): new (detail: string) => ApiError & { readonly code: C; readonly name: N } {
  return class extends ApiError {
    readonly code = code;
    override readonly permanent = permanent;
    override readonly name = name;
  };
}

/** The object (or its namespace) does not exist (HTTP 404). */
export class NotFound extends apiErrorClass("not-found", "NotFound") {}
/** A write lost a race: stale `resourceVersion`, or an apply field conflict without `force` (HTTP 409). */
export class Conflict extends apiErrorClass("conflict", "Conflict") {}
/** `create` of a name that is taken (HTTP 409). */
export class AlreadyExists extends apiErrorClass("already-exists", "AlreadyExists") {}
/** The plugin's permission grant (or the API server) does not allow the call. */
export class Forbidden extends apiErrorClass("forbidden", "Forbidden", true) {}
/** The API server rejected the object or patch (HTTP 422/400), including a failed JSON-patch `test`. */
export class Invalid extends apiErrorClass("invalid", "Invalid", true) {}
/** The reconcile's deadline ran out during the call. */
export class Timeout extends apiErrorClass("timeout", "Timeout") {}
/** The host cannot reach an API server. */
export class Unavailable extends apiErrorClass("unavailable", "Unavailable") {}
/** Anything else the host or API server reported. */
export class Other extends apiErrorClass("other", "Other") {}
/**
 * JSON crossing the boundary is not what it should be: a reply that is not a
 * JSON object, or a body that cannot be serialized. Raised by the SDK, not
 * by the host.
 */
export class Serialization extends apiErrorClass("serialization", "Serialization", true) {}

/** The error class of each WIT `api-error` case but `other`. */
const byCode = new Map<string, new (detail: string) => ApiError>([
  ["not-found", NotFound],
  ["conflict", Conflict],
  ["already-exists", AlreadyExists],
  ["forbidden", Forbidden],
  ["invalid", Invalid],
  ["timeout", Timeout],
  ["unavailable", Unavailable],
]);

/** The SDK error for a WIT `api-error` case. */
export function apiErrorOf(code: string, detail: string): ApiError {
  return new (byCode.get(code) ?? Other)(detail);
}
