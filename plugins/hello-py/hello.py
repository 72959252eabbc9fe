"""Annotates every ConfigMap with its number of keys (the README's hello)."""

from wasmctrl_sdk import Action, Api, Metadata, Patch, Reconciler, export, kinds, log


@export
class Hello(Reconciler):
    def metadata(self):
        return Metadata("hello", "0.1.0", kinds.CONFIG_MAP).permission(
            "", ["configmaps"], ["get", "list", "watch", "patch"]
        )

    def reconcile(self, key, ctx):
        configmaps = Api.namespaced(kinds.CONFIG_MAP, key.require_namespace())
        cm = configmaps.get_opt(key.name)
        if cm is None:
            return Action.done()  # deleted: nothing to do
        keys = str(len(cm.get("data") or {}))
        log.info(f"{key} has {keys} keys", attempt=ctx.attempt)
        annotate = {"metadata": {"annotations": {"hello.wasmctrl.dev/keys": keys}}}
        configmaps.patch(key.name, Patch.merge(annotate))
        return Action.requeue_after(300)
