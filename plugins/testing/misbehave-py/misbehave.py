"""A test reconciler in Python whose behaviour is chosen by the key's name,
so the host's tests can show the sandbox holds an interpreted guest as it
holds a compiled one:

- ``loop``: spins forever (the deadline must stop it);
- ``bomb``: allocates until the memory limit stops it;
- ``count``: fails with the number of reconciles this instance has run
  (module globals persist in ``instanceMode: reuse``, by design);
- ``attempt-<n>``: fails until attempt ``n`` (the context is never stale);
- ``slow-<ms>``: works for ``ms`` milliseconds, checking ``cancelled``;
- anything else: succeeds.
"""

import time

from wasmctrl_sdk import Action, Metadata, Reconciler, TransientError, export, kinds

CALLS = 0


@export
class Misbehave(Reconciler):
    def metadata(self):
        return Metadata("misbehave-py", "0.1.0", kinds.CONFIG_MAP)

    def reconcile(self, key, ctx):
        global CALLS
        CALLS += 1
        name = key.name
        if name == "loop":
            n = 0
            while True:
                n += 1
        if name == "bomb":
            chunks = []
            while True:
                chunks.append(bytearray(1 << 20))
        if name == "count":
            raise TransientError(f"calls={CALLS}")
        if name.startswith("slow-"):
            until = time.monotonic() + int(name[len("slow-"):]) / 1000
            while time.monotonic() < until and not ctx.cancelled():
                pass
            return Action.done()
        if name.startswith("attempt-"):
            wanted = int(name[len("attempt-"):])
            if ctx.attempt < wanted:
                raise TransientError(f"attempt {ctx.attempt} < {wanted}")
        return Action.done()
