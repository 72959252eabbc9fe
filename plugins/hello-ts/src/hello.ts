// Annotates every ConfigMap with its number of keys (the README's hello).
import { Action, Api, type Context, kinds, type KubeObject, log, Metadata, type ObjectKey, Patch, type Reconciler } from "@wasmctrl/sdk";

type ConfigMap = KubeObject & { data?: Record<string, string> };

export class Hello implements Reconciler {
  metadata(): Metadata {
    return new Metadata("hello", "0.1.0", kinds.ConfigMap).permission("", ["configmaps"], ["get", "list", "watch", "patch"]);
  }

  reconcile(key: ObjectKey, ctx: Context): Action {
    const configmaps = Api.namespaced<ConfigMap>(kinds.ConfigMap, key.requireNamespace());
    const cm = configmaps.getOpt(key.name);
    if (cm === undefined) return Action.done(); // deleted: nothing to do
    const keys = String(Object.keys(cm.data ?? {}).length);
    log.info(`${key} has ${keys} keys`, { attempt: ctx.attempt });
    configmaps.patch(key.name, Patch.merge({ metadata: { annotations: { "hello.wasmctrl.dev/keys": keys } } }));
    return Action.requeueAfterSeconds(300);
  }
}
