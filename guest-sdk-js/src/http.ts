/**
 * Requests to hosts outside the cluster, over `wasi:http/outgoing-handler`.
 *
 * The host sends every request itself, and only where the plugin's
 * `outbound` grant in the host config allows. A refused request fails the
 * whole reconcile with an error naming the rule (or ceiling) it failed;
 * redirects are not followed (a 3xx is an answer like any other);
 * everything ends at the reconcile's deadline. A header value may carry
 * `${secret:NAME}` ({@link placeholder} in `secrets`): the host
 * substitutes the secret toward the secret's hosts only.
 *
 * ```ts
 * import { http, secrets } from "@wasmctrl/sdk";
 *
 * const answer = http.get("https://api.example.com/v1/zones");
 * if (answer.status === 200) console.log(answer.json());
 * http.send({
 *   method: "PUT",
 *   url: "https://api.example.com/v1/zones/a",
 *   headers: [["authorization", `Bearer ${secrets.placeholder("token")}`]],
 *   body: JSON.stringify({ ttl: 60 }),
 * });
 * ```
 *
 * Calls are synchronous, like the rest of the SDK: `reconcile` is a plain
 * function, and the host blocks the guest, never the host's threads, while
 * a request is in flight. {@link HttpError} is a `TransientError`: escaping
 * `reconcile`, it retries the key with backoff. In unit tests,
 * `FakeCluster.answerHttp` cans answers. Needs a host of WIT 0.1.2 or later.
 */
import { TransientError } from "./errors.js";
import { backend } from "./host.js";
import type { Json } from "./objects.js";
import * as utf8 from "./utf8.js";

/**
 * A request got no answer: a bad URL, a refusal or failure of the host, or
 * an answer that broke off; or a body that is not what was expected.
 */
export class HttpError extends TransientError {}

export interface Request {
  /** `GET`, `PUT`, …: any token the host's grant allows. */
  method: string;
  /** An absolute `http://` or `https://` URL. */
  url: string;
  /** Name and value pairs, in order; a name may repeat. */
  headers?: [string, string][];
  /** Text is sent as UTF-8. */
  body?: Uint8Array | string;
}

/** A request as the host's seam carries it. */
export interface WireRequest {
  method: string;
  url: string;
  headers: [string, string][];
  body: Uint8Array;
}

/** An answer as the host's seam carries it. */
export interface WireResponse {
  status: number;
  headers: [string, Uint8Array][];
  body: Uint8Array;
}

/** A whole answer: status, headers (values as bytes) and body. */
export class Response {
  constructor(
    readonly status: number,
    readonly headers: [string, Uint8Array][] = [],
    readonly body: Uint8Array = new Uint8Array(),
  ) {}

  /** The first value of header `name` (case-insensitive), as text; undefined if absent or not UTF-8. */
  header(name: string): string | undefined {
    const wanted = name.toLowerCase();
    for (const [n, v] of this.headers) {
      if (n.toLowerCase() === wanted) {
        return utf8.decode(v);
      }
    }
    return undefined;
  }

  /** The body as UTF-8 text; throws {@link HttpError} if it is not. */
  text(): string {
    const text = utf8.decode(this.body);
    if (text === undefined) throw new HttpError("HTTP body: not UTF-8 text");
    return text;
  }

  /** The body as JSON; throws {@link HttpError} if it is not. */
  json(): Json {
    const text = this.text();
    try {
      return JSON.parse(text) as Json;
    } catch (e) {
      throw new HttpError(`HTTP body: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
}

/** Sends `request` through the host and returns the whole answer. */
export function send(request: Request): Response {
  if (!request.url.startsWith("https://") && !request.url.startsWith("http://")) {
    throw new HttpError(`bad URL: ${JSON.stringify(request.url)} must start with https:// or http://`);
  }
  const body = typeof request.body === "string" ? utf8.encode(request.body) : (request.body ?? new Uint8Array());
  const answer = backend().httpSend({ method: request.method, url: request.url, headers: request.headers ?? [], body });
  return new Response(answer.status, answer.headers, answer.body);
}

/** `GET url`, with optional headers. */
export function get(url: string, headers: [string, string][] = []): Response {
  return send({ method: "GET", url, headers });
}
