// A test reconciler in TypeScript whose behaviour is chosen by the key's
// name, so the host's tests can show the sandbox holds a JavaScript guest as
// it holds a compiled one:
// - `loop`: spins forever (the deadline must stop it);
// - `bomb`: allocates until the memory limit stops it;
// - `count`: fails with the number of reconciles this instance has run
//   (module state persists in `instanceMode: reuse`, by design);
// - `attempt-<n>`: fails until attempt `n` (the context is never stale);
// - `slow-<ms>`: works for `ms` milliseconds, checking `cancelled`;
// - anything else: succeeds.
import { Action, type Context, kinds, Metadata, type ObjectKey, type Reconciler, TransientError } from "@wasmctrl/sdk";
import { exportReconciler } from "@wasmctrl/sdk/component";

let calls = 0;

class Misbehave implements Reconciler {
  metadata(): Metadata {
    return new Metadata("misbehave-ts", "0.1.0", kinds.ConfigMap);
  }

  reconcile(key: ObjectKey, ctx: Context): Action {
    calls += 1;
    const name = key.name;
    if (name === "loop") {
      let n = 0;
      for (;;) n += 1;
    }
    if (name === "bomb") {
      const chunks: Uint8Array[] = [];
      for (;;) chunks.push(new Uint8Array(1 << 20).fill(1));
    }
    if (name === "count") throw new TransientError(`calls=${calls}`);
    if (name.startsWith("slow-")) {
      const until = Date.now() + Number(name.slice("slow-".length));
      while (Date.now() < until && !ctx.cancelled()) {
        // busy, as a reconcile doing work
      }
      return Action.done();
    }
    if (name.startsWith("attempt-")) {
      const wanted = Number(name.slice("attempt-".length));
      if (ctx.attempt < wanted) throw new TransientError(`attempt ${ctx.attempt} < ${wanted}`);
    }
    return Action.done();
  }
}

export const { metadata, reconcile } = exportReconciler(new Misbehave());
