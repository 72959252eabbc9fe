import { backend, type Backend } from "./host.js";
import { PermanentError } from "./errors.js";

/**
 * The context of one reconcile: its deadline, cancellation, attempt and the
 * plugin's settings from the host config.
 *
 * A new one is made for every reconcile and closed when it returns: using it
 * afterwards (say, from a reference kept in a module variable) throws
 * instead of answering about another reconcile. Nothing here is cached
 * across reconciles, so an instance the host reuses for many reconciles
 * never sees a stale deadline, attempt or settings.
 */
export class Context {
  #open = true;
  #settings: { value: unknown } | undefined;

  private b(): Backend {
    if (!this.#open) throw new Error("this Context belongs to a reconcile that has returned");
    return backend();
  }

  /** @internal Called by the SDK when the reconcile returns. */
  close(): void {
    this.#open = false;
    this.#settings = undefined;
  }

  /** Milliseconds left before the host interrupts this reconcile. */
  deadlineRemainingMs(): number {
    return this.b().deadlineRemainingMs();
  }

  /** True once the host asked this reconcile to stop (shutdown, unload). */
  cancelled(): boolean {
    return this.b().cancelled();
  }

  /** Retries of this key since its last success (0 on the first attempt). */
  get attempt(): number {
    return this.b().attempt();
  }

  /** The plugin's `settings` from the host config, as JSON text. */
  settingsJson(): string {
    return this.b().settings();
  }

  /**
   * The plugin's `settings`, parsed (`{}` if none). Invalid JSON is a
   * {@link PermanentError}: retrying cannot fix the config.
   */
  settings<T = unknown>(): T {
    const text = this.settingsJson();
    if (this.#settings === undefined) {
      try {
        this.#settings = { value: JSON.parse(text) };
      } catch (e) {
        throw new PermanentError(`invalid plugin settings: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
    return this.#settings.value as T;
  }
}
