// The reconciler against the SDK's fake API server (`npm test`): every call
// is held to the permissions its metadata declares.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Action, Api, conditions,{{test_imports}} ObjectKey } from "@wasmctrl/sdk";
import { FakeCluster } from "@wasmctrl/sdk/testing";

import { FINALIZER, {{Kind}}, type {{Kind}}Object, {{Reconciler}} } from "../src/{{plugin}}.js";

test("a new object becomes ready and is released on delete", () => {
  const cluster = new FakeCluster();
  try {
    const api = Api.namespaced<{{Kind}}Object>({{Kind}}, "default");
    const key = ObjectKey.namespaced("default", "sample");
    api.create({ metadata: { name: "sample" }, spec: {{spec_sample}} });

    assert.deepEqual(cluster.reconcile(new {{Reconciler}}(), key), Action.done());
    const object = api.get("sample");
    assert.deepEqual(object.metadata!.finalizers, [FINALIZER]);
    const generation = object.metadata!.generation;
    assert.equal(object.status!.observedGeneration, generation);
    const ready = conditions.get(object.status!.conditions, "Ready")!;
    assert.equal(ready.status, "True");
    assert.equal(ready.observedGeneration, generation);
{{test_owned}}
    // Nothing changed: the second reconcile leaves the status alone.
    const before = cluster.calls().length;
    assert.deepEqual(cluster.reconcile(new {{Reconciler}}(), key), Action.done());
    assert.ok(!cluster.calls().slice(before).some((c) => c.verb === "patch-status"));

    // Deleted: the finalizer runs, is removed, and the object goes away.
    api.delete("sample");
    assert.deepEqual(cluster.reconcile(new {{Reconciler}}(), key), Action.done());
    assert.equal(api.getOpt("sample"), undefined);
    assert.deepEqual(cluster.reconcile(new {{Reconciler}}(), key), Action.done());

    assert.deepEqual(cluster.unusedPermissions(new {{Reconciler}}()), []);
  } finally {
    cluster.close();
  }
});
