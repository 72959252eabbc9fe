/**
 * The DNS example operator in TypeScript: a `DNSRecord`
 * (demo.wasmctrl.dev/v1alpha1) becomes a record at an HTTP DNS provider —
 * the same job, settings and behaviour towards the cluster as the Rust
 * `plugins/dns` and the Python `plugins/dns-py`.
 *
 * - Every reconcile reads the remote record and puts it back when it is
 *   missing or differs from the spec (type, value, ttl), so a record
 *   changed at the provider is repaired at the next resync.
 * - The finalizer `dns.demo.wasmctrl.dev/record` deletes the remote record
 *   before the DNSRecord goes away.
 * - `status.conditions[Ready]` is True (`Synced`) once the provider holds
 *   the spec, else False (`ProviderError` with the provider's answer); a
 *   provider error is transient, so the key backs off and is retried.
 * - The plugin never sees the provider's token: every request carries
 *   `Authorization: Bearer ${secret:NAME}`, which the host fills in toward
 *   the secret's hosts only.
 *
 * Settings: `{"endpoint": "http://127.0.0.1:8053", "zone": "example.com",
 * "secret": "dns-token"}` (`secret` optional).
 */
import {
  Action,
  Api,
  type Condition,
  conditions,
  type Context,
  finalizer,
  http,
  kind,
  type KubeObject,
  Metadata,
  nameOf,
  type ObjectKey,
  PermanentError,
  type Reconciler,
  secrets,
  TransientError,
} from "@wasmctrl/sdk";

export const MANAGER = "dns";
export const VERSION = "0.1.0";
export const FINALIZER = "dns.demo.wasmctrl.dev/record";
/** How often a synced record is read again (s), to repair changes made at the provider, which sends no events. */
export const RESYNC_SECONDS = 300;

export const DNSRecord = kind("demo.wasmctrl.dev", "v1alpha1", "DNSRecord", "dnsrecords");

export interface DNSRecordSpec {
  name: string;
  type: string;
  value: string;
  ttl?: number;
}

export interface DNSRecordStatus {
  observedGeneration?: number;
  conditions?: Condition[];
}

export type DNSRecordObject = KubeObject<DNSRecordSpec, DNSRecordStatus>;

/** What the provider holds for a record. */
export interface Record {
  type: string;
  value: string;
  ttl: number;
}

interface Settings {
  endpoint?: unknown;
  zone?: unknown;
  secret?: unknown;
}

const NAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;

/** The provider did not answer as asked; retried with backoff. */
export class ProviderError extends TransientError {}

/** The provider's API, as the plugin's settings name it. */
class Provider {
  readonly endpoint: string;
  readonly zone: string;
  private readonly authorization: string;

  constructor(settings: Settings) {
    const { endpoint, zone, secret = "dns-token" } = settings;
    if (typeof endpoint !== "string" || !/^https?:\/\//.test(endpoint)) {
      throw new PermanentError("settings.endpoint must be an http:// or https:// URL");
    }
    if (typeof zone !== "string" || !NAME.test(zone)) throw new PermanentError("settings.zone must be a DNS name");
    if (typeof secret !== "string" || !NAME.test(secret)) throw new PermanentError("settings.secret must be a secret's name");
    this.endpoint = endpoint.replace(/\/+$/, "");
    this.zone = zone;
    this.authorization = `Bearer ${secrets.placeholder(secret)}`;
  }

  url(name: string): string {
    return `${this.endpoint}/zones/${this.zone}/records/${name}`;
  }

  private send(method: string, name: string, body?: string): http.Response {
    const headers: [string, string][] = [["authorization", this.authorization]];
    if (body !== undefined) headers.push(["content-type", "application/json"]);
    return http.send({ method, url: this.url(name), headers, body });
  }

  get(name: string): Record | undefined {
    const answer = this.send("GET", name);
    if (answer.status === 404) return undefined;
    if (answer.status !== 200) throw new ProviderError(`GET ${this.url(name)} answered ${answer.status}`);
    try {
      return answer.json() as unknown as Record;
    } catch {
      return undefined;
    }
  }

  put(name: string, record: Record): void {
    const answer = this.send("PUT", name, JSON.stringify(record));
    if (answer.status !== 200) throw new ProviderError(`PUT ${this.url(name)} answered ${answer.status}`);
  }

  delete(name: string): void {
    const answer = this.send("DELETE", name);
    if (answer.status !== 204 && answer.status !== 404) {
      throw new ProviderError(`DELETE ${this.url(name)} answered ${answer.status}`);
    }
  }
}

/** The record's name and what the provider should hold for it. */
export function desired(record: DNSRecordObject): [string, Record] {
  const spec = record.spec;
  if (spec === undefined || spec === null || typeof spec !== "object") {
    throw new PermanentError(`the DNSRecord ${nameOf(record)} has no spec`);
  }
  const { name, type, value, ttl = 300 } = spec;
  if (typeof name !== "string" || !NAME.test(name)) throw new PermanentError(`spec.name ${JSON.stringify(name)} is not a DNS name`);
  if (typeof type !== "string" || typeof value !== "string") throw new PermanentError("spec.type and spec.value must be strings");
  if (!Number.isInteger(ttl)) throw new PermanentError("spec.ttl must be an integer");
  return [name, { type, value, ttl }];
}

function same(held: Record | undefined, want: Record): boolean {
  return held !== undefined && held.type === want.type && held.value === want.value && held.ttl === want.ttl;
}

export class DnsReconciler implements Reconciler {
  metadata(): Metadata {
    // No outbound declaration: the endpoint comes from the settings, so the
    // host's grant for this plugin is the only list of destinations.
    return new Metadata(MANAGER, VERSION, DNSRecord)
      .permission(DNSRecord.group, ["dnsrecords"], ["get", "list", "watch", "patch"])
      .permission(DNSRecord.group, ["dnsrecords/status"], ["patch"]);
  }

  reconcile(key: ObjectKey, ctx: Context): Action {
    const records = Api.namespaced<DNSRecordObject>(DNSRecord, key.requireNamespace());
    const record = records.getOpt(key.name);
    if (record === undefined) {
      // Gone: its finalizer already removed the remote record.
      return Action.done();
    }
    const provider = new Provider(ctx.settings<Settings | null>() ?? {});
    return finalizer(records, FINALIZER, record, (event) => {
      if (event.type === "apply") return apply(records, provider, event.object);
      provider.delete(desired(event.object)[0]);
      return Action.done();
    });
  }
}

function apply(records: Api<DNSRecordObject>, provider: Provider, record: DNSRecordObject): Action {
  const [name, want] = desired(record);
  try {
    if (!same(provider.get(name), want)) provider.put(name, want);
  } catch (e) {
    if (e instanceof ProviderError || e instanceof http.HttpError) {
      writeReady(records, record, false, "ProviderError", e.detail);
    }
    throw e;
  }
  writeReady(records, record, true, "Synced", `${name}.${provider.zone} ${want.type} ${want.value}`);
  return Action.requeueAfterSeconds(RESYNC_SECONDS);
}

function writeReady(records: Api<DNSRecordObject>, record: DNSRecordObject, ready: boolean, reason: string, message: string): void {
  const generation = record.metadata?.generation;
  const current = conditions.get(record.status?.conditions, "Ready");
  if (
    record.status?.observedGeneration === generation &&
    current?.status === (ready ? "True" : "False") &&
    current?.reason === reason &&
    current?.message === message
  ) {
    return;
  }
  const status: DNSRecordStatus = {
    conditions: [conditions.newCondition("Ready", ready, reason, message, generation)],
  };
  if (generation !== undefined) status.observedGeneration = generation;
  records.applyStatus(nameOf(record), status, MANAGER, true);
}
