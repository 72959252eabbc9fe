/**
 * Status conditions (`metav1.Condition`), with apimachinery's
 * `meta.SetStatusCondition` semantics:
 *
 * ```ts
 * const ready = conditions.newCondition("Ready", false, "Progressing", "1/2 replicas ready", 3);
 * if (conditions.set(status.conditions, ready)) { ... } // changed: write the status
 * ```
 */

export interface Condition {
  type: string;
  status: "True" | "False" | "Unknown";
  reason: string;
  message: string;
  lastTransitionTime: string;
  observedGeneration?: number;
}

/** The current time in RFC 3339, whole seconds, UTC (as the API server stores `metav1.Time`). */
export function now(): string {
  return new Date(Math.floor(Date.now() / 1000) * 1000).toISOString().replace(".000Z", "Z");
}

/**
 * A condition of type `type` with status `"True"`/`"False"`, `reason`
 * (CamelCase) and `message`, its `lastTransitionTime` now;
 * `observedGeneration` only if given.
 */
export function newCondition(type: string, status: boolean, reason: string, message: string, observedGeneration?: number): Condition {
  const c: Condition = { type, status: status ? "True" : "False", reason, message, lastTransitionTime: now() };
  if (observedGeneration !== undefined) c.observedGeneration = observedGeneration;
  return c;
}

/**
 * Sets `condition` in `conditions` (in place), replacing the one of the same
 * type. `lastTransitionTime` only moves when the status changes: an existing
 * condition with the same status keeps its time, while its reason, message
 * and observedGeneration are updated (an absent observedGeneration removes
 * it). Returns true if anything other than a kept time changed (that is,
 * whether the status needs writing).
 */
export function set(conditions: Condition[], condition: Condition): boolean {
  const existing = get(conditions, condition.type);
  if (existing === undefined) {
    conditions.push({ ...condition });
    return true;
  }
  let changed = false;
  if (existing.status !== condition.status) {
    existing.status = condition.status;
    existing.lastTransitionTime = condition.lastTransitionTime;
    changed = true;
  }
  if (existing.reason !== condition.reason) {
    existing.reason = condition.reason;
    changed = true;
  }
  if (existing.message !== condition.message) {
    existing.message = condition.message;
    changed = true;
  }
  if (existing.observedGeneration !== condition.observedGeneration) {
    if (condition.observedGeneration === undefined) delete existing.observedGeneration;
    else existing.observedGeneration = condition.observedGeneration;
    changed = true;
  }
  return changed;
}

/** The condition of type `type`, if any. */
export function get(conditions: readonly Condition[] | undefined, type: string): Condition | undefined {
  return (conditions ?? []).find((c) => c.type === type);
}

/** True if the condition of type `type` exists with status `"True"`. */
export function isTrue(conditions: readonly Condition[] | undefined, type: string): boolean {
  return get(conditions, type)?.status === "True";
}

/** Removes the condition of type `type` (in place); true if there was one. */
export function remove(conditions: Condition[], type: string): boolean {
  const before = conditions.length;
  const kept = conditions.filter((c) => c.type !== type);
  conditions.splice(0, conditions.length, ...kept);
  return conditions.length !== before;
}
