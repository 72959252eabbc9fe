/**
 * Structured logging into the host's log, inside the reconcile's span:
 * `log.info("created", { name })`. Prefer it to `console.log`, which reaches
 * the host only as unstructured stdout lines.
 */
import { backend, type LogLevel } from "./host.js";

export type { LogLevel };

/** Log `message` at `level` with `fields` (values converted with `String`). */
export function log(level: LogLevel, message: string, fields: Record<string, unknown> = {}): void {
  backend().log(
    level,
    String(message),
    Object.entries(fields).map(([k, v]) => [k, String(v)]),
  );
}

/**
 * Whether a message at `level` would be kept now (the host's log filter lets
 * it through and this reconcile's log budget is not used up): check it before
 * building an expensive message. Needs a host of WIT 0.1.1 or later.
 */
export function enabled(level: LogLevel): boolean {
  return backend().logEnabled(level);
}

export const trace = (message: string, fields?: Record<string, unknown>): void => log("trace", message, fields);
export const debug = (message: string, fields?: Record<string, unknown>): void => log("debug", message, fields);
export const info = (message: string, fields?: Record<string, unknown>): void => log("info", message, fields);
export const warn = (message: string, fields?: Record<string, unknown>): void => log("warn", message, fields);
export const error = (message: string, fields?: Record<string, unknown>): void => log("error", message, fields);
