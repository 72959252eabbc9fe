import assert from "node:assert/strict";
import { test } from "node:test";

import { Action, Api, kinds, type KubeObject, ObjectKey } from "@wasmctrl/sdk";
import { FakeCluster } from "@wasmctrl/sdk/testing";

import { Hello } from "../src/hello.js";

test("annotates the number of keys", () => {
  const cluster = new FakeCluster();
  const configmaps = Api.namespaced<KubeObject & { data?: Record<string, string> }>(kinds.ConfigMap, "default");
  configmaps.create({ metadata: { name: "app" }, data: { a: "1", b: "2" } });
  assert.deepEqual(cluster.reconcile(new Hello(), ObjectKey.namespaced("default", "app")), Action.requeueAfterSeconds(300));
  assert.equal(configmaps.get("app").metadata!.annotations!["hello.wasmctrl.dev/keys"], "2");
  assert.deepEqual(cluster.logs[0]!.fields, [["attempt", "0"]]);
  assert.deepEqual(cluster.reconcile(new Hello(), ObjectKey.namespaced("default", "gone")), Action.done());
  assert.deepEqual(cluster.unusedPermissions(new Hello()), []);
  cluster.close();
});
