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

/** The object (or its namespace) does not exist (HTTP 404). */
export class NotFound extends ApiError {
  readonly code = "not-found";
  override readonly name = "NotFound";
}
/** A write lost a race: stale `resourceVersion`, or an apply field conflict without `force` (HTTP 409). */
export class Conflict extends ApiError {
  readonly code = "conflict";
  override readonly name = "Conflict";
}
/** `create` of a name that is taken (HTTP 409). */
export class AlreadyExists extends ApiError {
  readonly code = "already-exists";
  override readonly name = "AlreadyExists";
}
/** The plugin's permission grant (or the API server) does not allow the call. */
export class Forbidden extends ApiError {
  readonly code = "forbidden";
  override readonly permanent = true;
  override readonly name = "Forbidden";
}
/** The API server rejected the object or patch (HTTP 422/400), including a failed JSON-patch `test`. */
export class Invalid extends ApiError {
  readonly code = "invalid";
  override readonly permanent = true;
  override readonly name = "Invalid";
}
/** The reconcile's deadline ran out during the call. */
export class Timeout extends ApiError {
  readonly code = "timeout";
  override readonly name = "Timeout";
}
/** The host cannot reach an API server. */
export class Unavailable extends ApiError {
  readonly code = "unavailable";
  override readonly name = "Unavailable";
}
/** Anything else the host or API server reported. */
export class Other extends ApiError {
  readonly code = "other";
  override readonly name = "Other";
}
/**
 * JSON crossing the boundary is not what it should be: a reply that is not a
 * JSON object, or a body that cannot be serialized. Raised by the SDK, not
 * by the host.
 */
export class Serialization extends ApiError {
  readonly code = "serialization";
  override readonly permanent = true;
  override readonly name = "Serialization";
}

/** The SDK error for a WIT `api-error` case. */
export function apiErrorOf(code: string, detail: string): ApiError {
  switch (code) {
    case "not-found":
      return new NotFound(detail);
    case "conflict":
      return new Conflict(detail);
    case "already-exists":
      return new AlreadyExists(detail);
    case "forbidden":
      return new Forbidden(detail);
    case "invalid":
      return new Invalid(detail);
    case "timeout":
      return new Timeout(detail);
    case "unavailable":
      return new Unavailable(detail);
    default:
      return new Other(detail);
  }
}
