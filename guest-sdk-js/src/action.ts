/**
 * What the host does with the key after a successful reconcile
 * (controller-runtime's `Result`): {@link Action.requeueAfter} re-adds the
 * key after a delay (and resets its backoff), {@link Action.requeue}
 * re-adds it with per-key backoff, and {@link Action.done} forgets the key
 * until the next watch event.
 */
export class Action {
  private constructor(
    readonly requeue: boolean,
    /** Milliseconds; 0 means none. */
    readonly requeueAfterMs: number,
  ) {}

  /** The object is in its desired state; wait for the next change. */
  static done(): Action {
    return new Action(false, 0);
  }

  /** Reconcile again soon, with per-key exponential backoff. */
  static requeue(): Action {
    return new Action(true, 0);
  }

  /**
   * Reconcile again after `ms` milliseconds (use this to wait for something
   * external, never a sleep). Zero means {@link Action.done}; a positive
   * delay is whole milliseconds, at least 1.
   */
  static requeueAfter(ms: number): Action {
    if (!Number.isFinite(ms) || ms < 0) {
      throw new RangeError(`requeueAfter: the delay must be a finite number >= 0 ms, not ${ms}`);
    }
    if (ms === 0) return Action.done();
    return new Action(false, Math.min(Math.max(Math.floor(ms), 1), Number.MAX_SAFE_INTEGER));
  }

  /** Reconcile again after `seconds`. */
  static requeueAfterSeconds(seconds: number): Action {
    return Action.requeueAfter(seconds * 1000);
  }

  equals(other: Action): boolean {
    return this.requeue === other.requeue && this.requeueAfterMs === other.requeueAfterMs;
  }

  toString(): string {
    if (this.requeueAfterMs) return `Action.requeueAfter(${this.requeueAfterMs})`;
    return this.requeue ? "Action.requeue()" : "Action.done()";
  }
}
