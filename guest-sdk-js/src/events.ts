/** Kubernetes Events about an object (events.k8s.io/v1 semantics), recorded through the host. */
import { backend } from "./host.js";
import { gvkOf, type Gvk, type ObjectKey } from "./metadata.js";
import { keyOf, type KubeObject } from "./objects.js";

/** Whether an event is routine or worth someone's attention. */
export type EventType = "Normal" | "Warning";

/**
 * Records events regarding one object. The host fills in what the WIT
 * `event` record does not carry: the reporting controller (the plugin), the
 * reporting instance, the event time and the regarding object's uid.
 *
 * ```ts
 * new Recorder(WebApp, app).publish("Normal", "Synced", "Reconcile", "copied 3 keys");
 * ```
 */
export class Recorder {
  readonly kind: Gvk;
  readonly key: ObjectKey;

  constructor(kind: Gvk, obj: KubeObject) {
    this.kind = gvkOf(kind);
    this.key = keyOf(obj);
  }

  /** A recorder for events regarding the object of `kind` at `key` (for example one that could not be read). */
  static forKey(kind: Gvk, key: ObjectKey): Recorder {
    return new Recorder(kind, { metadata: { name: key.name, namespace: key.namespace } });
  }

  /**
   * Records an event: `reason` is CamelCase and machine-readable (`Ready`),
   * `action` what the controller did or failed to do (`Reconcile`), `note` a
   * human-readable sentence. Throws an `ApiError`; events are best-effort
   * signals, so callers often log a failure rather than fail the reconcile.
   */
  publish(type: EventType, reason: string, action: string, note: string): void {
    if (type !== "Normal" && type !== "Warning") throw new TypeError(`publish: "Normal" or "Warning", not ${String(type)}`);
    backend().recordEvent({
      regardingKind: this.kind,
      regardingNamespace: this.key.namespace,
      regardingName: this.key.name,
      type,
      reason,
      action,
      note,
    });
  }
}
