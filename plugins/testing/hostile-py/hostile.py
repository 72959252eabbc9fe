"""A hostile reconciler in Python: the Rust ``hostile`` plugin's attacks that
an interpreted guest makes in its own way, chosen by the key's name, so
that tests can show the host holds them as it holds a compiled guest's:

- ``output-flood``: 64 MiB to stdout without a newline, then 100,000 short
  lines;
- ``huge-error``: fails (transient) with an 8 MiB error message;
- ``deep-json``: creates its ConfigMap, and merge- and JSON-patches it,
  with a value nested 100,000 levels deep; succeeds only if the host
  refused all three as ``invalid``;
- ``host-call-flood``: ``kube`` gets in a loop until the host stops it;
- anything else: labels its ConfigMap ``wasmctrl.dev/hostile: reconciled``.
"""

import sys

from wasmctrl_sdk import (
    Action,
    Api,
    ApiError,
    Invalid,
    Metadata,
    NotFound,
    Patch,
    PermanentError,
    Reconciler,
    TransientError,
    _host,
    export,
    kinds,
    log,
)

DEPTH = 100_000


def output_flood() -> Action:
    out = sys.stdout.buffer
    chunk = b"x" * (64 << 10)
    for _ in range((64 << 20) // len(chunk)):
        out.write(chunk)
    out.flush()
    for i in range(100_000):
        out.write(b"line %d\n" % i)
    out.flush()
    return Action.done()


def deep_json(namespace: str, name: str) -> Action:
    # Text, not a Python object: json.dumps of a list this deep would stop
    # at the interpreter's recursion limit, and the SDK's Api only sends
    # what it serialized itself, hence its backend seam.
    deep = "[" * DEPTH + "]" * DEPTH
    gvk = kinds.CONFIG_MAP.gvk
    backend = _host.backend()
    attempts = {
        "create": lambda: backend.create(
            gvk,
            namespace,
            '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"%s"},"data":{"x":%s}}'
            % (name, deep),
        ),
        "merge patch": lambda: backend.patch(
            gvk, namespace, name, _host.WirePatch("merge", '{"data":{"x":%s}}' % deep)
        ),
        "json patch": lambda: backend.patch(
            gvk,
            namespace,
            name,
            _host.WirePatch("json", '[{"op":"add","path":"/data/x","value":%s}]' % deep),
        ),
    }
    escaped = []
    for what, attempt in attempts.items():
        try:
            attempt()
            escaped.append(f"{what}: accepted")
        except Invalid:
            pass
        except ApiError as e:
            escaped.append(f"{what}: {type(e).__name__}: {e}")
    if escaped:
        raise PermanentError("not refused as invalid: " + "; ".join(escaped))
    log.info("every deep body was refused")
    return Action.done()


@export
class Hostile(Reconciler):
    def metadata(self):
        return Metadata("hostile-py", "0.1.0", kinds.CONFIG_MAP).permission(
            "", ["configmaps"], ["get", "list", "watch", "patch", "create"]
        )

    def reconcile(self, key, ctx):
        namespace = key.require_namespace()
        configmaps = Api.namespaced(kinds.CONFIG_MAP, namespace)
        name = key.name
        if name == "output-flood":
            return output_flood()
        if name == "huge-error":
            raise TransientError("e" * (8 << 20))
        if name == "deep-json":
            return deep_json(namespace, name)
        if name == "host-call-flood":
            while True:
                try:
                    configmaps.get(name)
                except ApiError:
                    pass
        try:
            configmaps.patch(
                name, Patch.merge({"metadata": {"labels": {"wasmctrl.dev/hostile": "reconciled"}}})
            )
        except NotFound:
            pass
        return Action.done()
