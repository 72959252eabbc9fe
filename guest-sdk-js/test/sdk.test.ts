// The SDK's behaviour, natively, against its FakeCluster (the TypeScript
// counterpart of guest-sdk/src/tests.rs): `npm test`.
import assert from "node:assert/strict";
import { afterEach, beforeEach, describe, test } from "node:test";

import {
  Action,
  AlreadyExists,
  Api,
  type ApiError,
  type Condition,
  Conflict,
  type Context,
  conditions,
  escapePointer,
  finalizer,
  http,
  finalizersOf,
  Forbidden,
  Invalid,
  isDeleting,
  keyOf,
  kind,
  kinds,
  type KubeObject,
  log,
  Metadata,
  nameOf,
  newObject,
  NotFound,
  ObjectKey,
  Other,
  Patch,
  PatchOp,
  PermanentError,
  type Reconciler,
  ReconcileError,
  Recorder,
  secrets,
  Serialization,
  Timeout,
  TransientError,
  Unavailable,
  WatchMapping,
  controllerOwnerRef,
} from "../src/index.js";
import { plan } from "../src/finalizer.js";
import { install } from "../src/host.js";
import { run } from "../src/reconciler.js";
import { FakeCluster, plural } from "../src/testing.js";

const Gadget = kind("test.wasmctrl.dev", "v1", "Gadget", "gadgets");
type GadgetObj = KubeObject<{ size: number }, { conditions?: Condition[]; phase?: string }>;
const FIN = "test.wasmctrl.dev/cleanup";
const DELETED = "2024-01-01T00:00:00Z";

const gadgets = (ns = "ns") => Api.namespaced<GadgetObj>(Gadget, ns);
const gadget = (metadata: KubeObject["metadata"], size = 1): GadgetObj => ({ metadata, spec: { size } });

let cluster: FakeCluster;
beforeEach(() => {
  cluster = new FakeCluster();
});
afterEach(() => {
  cluster.close();
});

describe("kinds and keys", () => {
  test("kind facts", () => {
    assert.deepEqual(newObject(Gadget, "g", { spec: { size: 1 } }), {
      apiVersion: "test.wasmctrl.dev/v1",
      kind: "Gadget",
      metadata: { name: "g" },
      spec: { size: 1 },
    });
    assert.equal(newObject(kinds.ConfigMap, "c").apiVersion, "v1");
  });

  test("controllerOwnerRef needs a uid", () => {
    assert.equal(controllerOwnerRef(Gadget, gadget({ name: "g" })), undefined);
    assert.deepEqual(controllerOwnerRef(Gadget, gadget({ name: "g", uid: "u1" })), {
      apiVersion: "test.wasmctrl.dev/v1",
      kind: "Gadget",
      name: "g",
      uid: "u1",
      controller: true,
      blockOwnerDeletion: true,
    });
  });

  test("plural follows Kubernetes defaults", () => {
    for (const [k, p] of [
      ["Deployment", "deployments"],
      ["Ingress", "ingresses"],
      ["Policy", "policies"],
      ["Gateway", "gateways"],
      ["Box", "boxes"],
    ]) {
      assert.equal(plural(k!), p);
    }
  });

  test("keys", () => {
    const key = ObjectKey.namespaced("ns", "a");
    assert.equal(`${key}`, "ns/a");
    assert.equal(key.requireNamespace(), "ns");
    assert.throws(() => ObjectKey.cluster("n").requireNamespace(), PermanentError);
    assert.deepEqual(keyOf({ metadata: { name: "a", namespace: "ns" } }), key);
  });
});

describe("Action", () => {
  test("requeueAfter is whole milliseconds, never zero", () => {
    assert.equal(Action.requeueAfter(5000).requeueAfterMs, 5000);
    assert.equal(Action.requeueAfterSeconds(1.5).requeueAfterMs, 1500);
    assert.equal(Action.requeueAfter(0.2).requeueAfterMs, 1);
    assert.deepEqual(Action.requeueAfter(0), Action.done());
    assert.equal(Action.requeue().requeue, true);
    assert.throws(() => Action.requeueAfter(-1), RangeError);
    assert.throws(() => Action.requeueAfter(Number.NaN), RangeError);
  });
});

describe("Api", () => {
  test("getOpt maps NotFound to undefined", () => {
    const api = Api.namespaced(kinds.ConfigMap, "ns");
    const created = api.create({ metadata: { name: "there" } });
    assert.ok(created.metadata?.uid);
    assert.equal(nameOf(api.getOpt("there")!), "there");
    assert.equal(api.getOpt("missing"), undefined);
    assert.throws(() => api.get("missing"), NotFound);
    const calls = cluster.calls();
    assert.deepEqual(calls[1]!.kind, { group: "", version: "v1", kind: "ConfigMap" });
    assert.deepEqual([calls[1]!.verb, calls[1]!.namespace], ["get", "ns"]);
    assert.equal((calls[0]!.body as { kind: string }).kind, "ConfigMap", "typed: apiVersion/kind come from the Kind");
    assert.throws(() => api.create({ metadata: { name: "there" } }), AlreadyExists);
  });

  test("a reply of the wrong shape is a Serialization error", () => {
    install({ get: () => "[1, 2]" } as never);
    const e = assertThrows(() => gadgets().get("g"), Serialization);
    assert.equal(e.toReconcileError().permanent, true);
    assert.throws(() => gadgets().create({ metadata: { name: "g" }, spec: { size: 1n as unknown as number, f: () => 1 } } as never), Serialization);
  });

  test("list filters by namespace and labels", () => {
    for (const [ns, name, labels] of [
      ["a", "one", { app: "x" }],
      ["a", "two", { app: "y" }],
      ["b", "three", { app: "x", tier: "web" }],
    ] as const) {
      Api.namespaced(Gadget, ns).create(gadget({ name, labels: { ...labels } }));
    }
    const names = (items: KubeObject[]) => items.map(nameOf);
    assert.deepEqual(names(Api.all(Gadget).list("app=x")), ["one", "three"]);
    assert.deepEqual(names(Api.namespaced(Gadget, "a").list()), ["one", "two"]);
    assert.deepEqual(names(Api.all(Gadget).list("app!=y,tier")), ["three"]);
    const last = cluster.calls().at(-1)!;
    assert.deepEqual([last.verb, last.namespace, last.body], ["list", undefined, "app!=y,tier"]);
  });

  test("apply sends the typed object as a server-side apply", () => {
    const deployments = Api.namespaced(kinds.Deployment, "ns");
    const d: KubeObject<{ replicas: number }> = { metadata: { name: "web" }, spec: { replicas: 2 } };
    let stored = deployments.apply(d, "mgr", true);
    assert.equal(stored.metadata?.generation, 1);
    const call = cluster.calls()[0]!;
    assert.deepEqual([call.verb, call.name, call.patch], ["patch", "web", "apply mgr force=true"]);
    const body = call.body as { apiVersion: string; kind: string };
    assert.deepEqual([body.apiVersion, body.kind], ["apps/v1", "Deployment"]);
    d.spec!.replicas = 3;
    stored = deployments.apply(d, "mgr", true);
    assert.deepEqual([(stored.spec as { replicas: number }).replicas, stored.metadata?.generation], [3, 2]);
    assert.throws(() => deployments.apply({ spec: {} }, "mgr", true), Invalid);
  });

  test("applyStatus sends only type meta, name and status", () => {
    gadgets().create(gadget({ name: "g" }));
    const status = { conditions: [conditions.newCondition("Ready", true, "Done", "")] };
    const stored = gadgets().applyStatus("g", status, "mgr");
    assert.deepEqual(stored.status, status);
    assert.equal(stored.metadata?.generation, 1, "status writes keep the generation");
    const call = cluster.calls().at(-1)!;
    assert.deepEqual([call.verb, call.patch], ["patch-status", "apply mgr force=false"]);
    const body = call.body as Record<string, unknown>;
    assert.deepEqual(body["metadata"], { name: "g" });
    assert.equal(body["kind"], "Gadget");
    assert.equal("spec" in body, false);
  });

  test("patches serialize as their kind", () => {
    gadgets().create(gadget({ name: "g" }));
    assert.equal(gadgets().patch("g", Patch.merge({ spec: { size: 2 } })).spec?.size, 2);
    const patched = gadgets().patch("g", Patch.json([PatchOp.test("/spec/size", 2), PatchOp.replace("/spec/size", 3)]));
    assert.equal(patched.spec?.size, 3);
    const calls = cluster.calls();
    assert.deepEqual([calls[1]!.patch, calls[2]!.patch], ["merge", "json"]);
    assert.deepEqual(calls[2]!.body, [
      { op: "test", path: "/spec/size", value: 2 },
      { op: "replace", path: "/spec/size", value: 3 },
    ]);
    assert.throws(() => gadgets().patch("g", Patch.json([PatchOp.test("/spec/size", 2)])), Invalid);
    assert.equal(escapePointer("a/b~c"), "a~1b~0c");
  });

  test("replace with a stale resourceVersion conflicts", () => {
    const created = gadgets().create(gadget({ name: "g" }));
    gadgets().replace("g", { ...created, spec: { size: 2 } });
    assert.throws(() => gadgets().replace("g", { ...created, spec: { size: 3 } }), Conflict);
  });

  test("replaceStatus changes only the status", () => {
    const created = gadgets().create(gadget({ name: "g" }));
    const stored = gadgets().replaceStatus("g", { ...created, spec: { size: 9 }, status: { phase: "Up" } });
    assert.deepEqual([stored.spec?.size, stored.status], [1, { phase: "Up" }]);
    assert.equal(cluster.calls().at(-1)!.verb, "replace-status");
  });

  test("delete reports whether the object existed", () => {
    gadgets().create(gadget({ name: "g" }));
    assert.equal(gadgets().delete("g"), true);
    assert.equal(gadgets().delete("g"), false);
  });

  test("cluster-scoped kinds have no namespaced handle", () => {
    assert.throws(() => Api.namespaced(kinds.Namespace, "ns"), TypeError);
    Api.all(kinds.Namespace).create({ metadata: { name: "team" } });
    const ns = Api.all(kinds.Namespace).get("team");
    assert.equal(ns.kind, "Namespace");
    assert.equal(ns.metadata?.namespace, undefined);
  });

  test("API errors are transient except Invalid, Forbidden and Serialization", () => {
    for (const E of [NotFound, Conflict, AlreadyExists, Timeout, Unavailable, Other]) {
      assert.ok(new E("").toReconcileError() instanceof TransientError, E.name);
    }
    for (const E of [Invalid, Forbidden, Serialization]) {
      assert.ok(new E("").toReconcileError() instanceof PermanentError, E.name);
    }
    assert.equal(`${new Forbidden("x")}`, "forbidden: x");
    assert.equal(new Forbidden("x").toReconcileError().detail, "forbidden: x");
  });
});

function assertThrows<E extends Error>(f: () => unknown, cls: new (...args: never[]) => E): E {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${String(e)}`);
    return e;
  }
  assert.fail(`expected ${cls.name}`);
}

describe("finalizer", () => {
  test("the plan guards every write with a test", () => {
    assert.deepEqual(plan(gadget({ name: "g" }), FIN), {
      step: "add",
      ops: [
        { op: "test", path: "/metadata/finalizers", value: null },
        { op: "add", path: "/metadata/finalizers", value: [FIN] },
      ],
    });
    assert.deepEqual(plan(gadget({ name: "g", finalizers: ["a"] }), FIN), {
      step: "add",
      ops: [
        { op: "test", path: "/metadata/finalizers", value: ["a"] },
        { op: "add", path: "/metadata/finalizers/-", value: FIN },
      ],
    });
    assert.deepEqual(plan(gadget({ name: "g", finalizers: [FIN] }), FIN), { step: "apply" });
    assert.deepEqual(plan(gadget({ name: "g", finalizers: ["a", FIN], deletionTimestamp: DELETED }), FIN), {
      step: "cleanup",
      ops: [
        { op: "test", path: "/metadata/finalizers/1", value: FIN },
        { op: "remove", path: "/metadata/finalizers/1" },
      ],
    });
    assert.deepEqual(plan(gadget({ name: "g", finalizers: ["a"], deletionTimestamp: DELETED }), FIN), { step: "nothing" });
  });

  test("adds itself, then applies the patched object", () => {
    const created = gadgets().create(gadget({ name: "g" }));
    const seen: string[][] = [];
    const action = finalizer(gadgets(), FIN, created, (event) => {
      assert.equal(event.type, "apply");
      seen.push(finalizersOf(event.object));
      return Action.requeue();
    });
    assert.deepEqual(action, Action.requeue());
    assert.deepEqual(seen, [[FIN]]);
    const calls = cluster.calls();
    assert.deepEqual([calls.length, calls[1]!.verb, calls[1]!.patch], [2, "patch", "json"]);
  });

  test("runs cleanup, then removes itself, and the object goes", () => {
    gadgets().create(gadget({ name: "g", finalizers: ["other", FIN] }));
    gadgets().delete("g");
    const deleting = gadgets().get("g");
    assert.ok(isDeleting(deleting));
    const cleaned: string[] = [];
    const action = finalizer(gadgets(), FIN, deleting, (event) => {
      assert.equal(event.type, "cleanup");
      cleaned.push(nameOf(event.object));
      return Action.done();
    });
    assert.deepEqual(action, Action.done());
    assert.deepEqual(cleaned, ["g"]);
    assert.deepEqual(finalizersOf(gadgets().get("g")), ["other"]);
    gadgets().patch("g", Patch.json([PatchOp.remove("/metadata/finalizers/0")]));
    assert.equal(gadgets().getOpt("g"), undefined);
  });

  test("keeps itself when cleanup fails", () => {
    gadgets().create(gadget({ name: "g", finalizers: [FIN] }));
    gadgets().delete("g");
    const deleting = gadgets().get("g");
    cluster.clearCalls();
    const e = assertThrows(
      () =>
        finalizer(gadgets(), FIN, deleting, () => {
          throw new TransientError("external API down");
        }),
      TransientError,
    );
    assert.equal(e.detail, "external API down");
    assert.deepEqual(cluster.calls(), []);
    assert.ok(gadgets().getOpt("g"));
  });

  test("turns a lost race into a transient error", () => {
    const stale = gadgets().create(gadget({ name: "g" }));
    // Someone else adds a finalizer after we read the object.
    gadgets().patch("g", Patch.merge({ metadata: { finalizers: ["theirs"] } }));
    const never = (): Action => assert.fail("not reached");
    assert.throws(() => finalizer(gadgets(), FIN, stale, never), TransientError);
    assert.deepEqual(finalizersOf(gadgets().get("g")), ["theirs"], "the other writer's finalizer is not clobbered");

    const fresh = new FakeCluster();
    const obj = gadgets().create(gadget({ name: "g" }));
    fresh.failNext("patch", new Conflict("stale"));
    assert.throws(() => finalizer(gadgets(), FIN, obj, never), TransientError);
    fresh.failNext("patch", new Forbidden("no patch"));
    assert.throws(() => finalizer(gadgets(), FIN, obj, never), PermanentError);
  });

  test("leaves a deleting object without it alone", () => {
    const deleting = gadget({ name: "g", deletionTimestamp: DELETED });
    assert.deepEqual(finalizer(gadgets(), FIN, deleting, () => assert.fail("not ours")), Action.done());
    assert.deepEqual(cluster.calls(), []);
  });
});

describe("garbage collection", () => {
  test("deleting an owner deletes what it controls", () => {
    const owner = gadgets().create(gadget({ name: "g" }));
    const configmaps = Api.namespaced(kinds.ConfigMap, "ns");
    configmaps.create({ metadata: { name: "owned", ownerReferences: [controllerOwnerRef(Gadget, owner)!] } });
    gadgets().delete("g");
    assert.equal(configmaps.getOpt("owned"), undefined);
  });
});

describe("conditions", () => {
  test("the time moves only when the status changes", () => {
    const items: Condition[] = [];
    assert.ok(conditions.set(items, { ...conditions.newCondition("Ready", false, "Progressing", "0/2"), lastTransitionTime: "t100" }));
    assert.equal(conditions.isTrue(items, "Ready"), false);

    // Same status, new message and generation: updated, time kept.
    const again = { ...conditions.newCondition("Ready", false, "Progressing", "1/2", 2), lastTransitionTime: "t200" };
    assert.ok(conditions.set(items, again));
    const ready = conditions.get(items, "Ready")!;
    assert.deepEqual([ready.lastTransitionTime, ready.message, ready.observedGeneration], ["t100", "1/2", 2]);

    // Nothing new: no change.
    assert.equal(conditions.set(items, again), false);

    // Status flips: the time moves; no observedGeneration removes it.
    assert.ok(conditions.set(items, { ...conditions.newCondition("Ready", true, "Available", "2/2"), lastTransitionTime: "t300" }));
    assert.ok(conditions.isTrue(items, "Ready"));
    assert.equal(conditions.get(items, "Ready")!.lastTransitionTime, "t300");
    assert.equal("observedGeneration" in conditions.get(items, "Ready")!, false);

    // Other types are independent.
    assert.ok(conditions.set(items, conditions.newCondition("Degraded", false, "AsExpected", "")));
    assert.equal(items.length, 2);
    assert.ok(conditions.remove(items, "Degraded"));
    assert.equal(conditions.remove(items, "Degraded"), false);
  });

  test("times are whole seconds in RFC 3339", () => {
    const c = conditions.newCondition("Ready", true, "Available", "");
    assert.match(c.lastTransitionTime, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.equal(c.status, "True");
    assert.equal("observedGeneration" in c, false);
  });
});

describe("events and logs", () => {
  test("the recorder publishes regarding the object", () => {
    new Recorder(Gadget, gadget({ name: "g", namespace: "ns" })).publish("Warning", "Failed", "Reconcile", "it broke");
    const event = cluster.events()[0]!;
    assert.deepEqual(event.kind, { group: "test.wasmctrl.dev", version: "v1", kind: "Gadget" });
    assert.deepEqual([event.namespace, event.name], ["ns", "g"]);
    assert.deepEqual(event.body, { type: "Warning", reason: "Failed", action: "Reconcile", note: "it broke" });
    Recorder.forKey(Gadget, ObjectKey.cluster("c")).publish("Normal", "Seen", "Reconcile", "");
    assert.deepEqual([cluster.events()[1]!.namespace, (cluster.events()[1]!.body as { type: string }).type], [undefined, "Normal"]);
  });

  test("log.enabled asks the host", () => {
    assert.equal(log.enabled("debug"), true);
    cluster.logLevel = "info";
    assert.equal(log.enabled("debug"), false);
    assert.equal(log.enabled("warn"), true);
  });

  test("logs go to the host with fields", () => {
    log.info("hello", { key: "ns/a", n: 3 });
    assert.deepEqual(cluster.logs, [{ level: "info", message: "hello", fields: [["key", "ns/a"], ["n", "3"]] }]);
  });
});

class ReadsGadgets implements Reconciler {
  metadata(): Metadata {
    return new Metadata("reads", "0.1.0", Gadget)
      .owns(kinds.Deployment)
      .watches(kinds.ConfigMap, WatchMapping.label("gadget"))
      .permission(Gadget.group, [Gadget.plural], ["get"]);
  }

  reconcile(key: ObjectKey, ctx: Context): Action {
    const api = Api.namespaced<GadgetObj>(Gadget, key.requireNamespace());
    const g = api.get(key.name);
    if (ctx.settings<{ write: boolean }>().write) api.applyStatus(nameOf(g), {}, "reads", true);
    return Action.requeueAfterSeconds(ctx.attempt);
  }
}

describe("reconcile", () => {
  test("a reconcile is held to the declared permissions", () => {
    gadgets().create(gadget({ name: "g" }));
    const key = ObjectKey.namespaced("ns", "g");
    cluster.setSettings({ write: false });
    cluster.setAttempt(7);
    assert.deepEqual(cluster.reconcile(new ReadsGadgets(), key), Action.requeueAfter(7000));

    cluster.setSettings({ write: true });
    cluster.clearCalls();
    const e = assertThrows(() => cluster.reconcile(new ReadsGadgets(), key), PermanentError);
    assert.match(e.detail, /^forbidden: .*gadgets\/status/);
    assert.deepEqual(cluster.permissionsUsed(), [
      ["get", "test.wasmctrl.dev", "gadgets"],
      ["patch", "test.wasmctrl.dev", "gadgets/status"],
    ]);
    assert.deepEqual(cluster.unusedPermissions(new ReadsGadgets()), []);
    // Outside a reconcile (setting the scene), nothing is checked.
    gadgets().applyStatus("g", {}, "test", true);
  });

  test("metadata names kinds and mappings", () => {
    const m = new ReadsGadgets().metadata();
    assert.equal(m.for.kind, "Gadget");
    assert.equal(m.owned[0]!.group, "apps");
    assert.deepEqual(m.watched[0]!.mapping, { tag: "label", val: "gadget" });
    assert.deepEqual(m.permissions[0]!.resources, ["gadgets"]);
  });

  test("invalid settings are permanent", () => {
    gadgets().create(gadget({ name: "g" }));
    cluster.setSettingsJson("{not json");
    const e = assertThrows(() => cluster.reconcile(new ReadsGadgets(), ObjectKey.namespaced("ns", "g")), PermanentError);
    assert.match(e.detail, /invalid plugin settings/);
  });

  test("an escaping ApiError follows the transient rule", () => {
    const e = assertThrows(() => cluster.reconcile(new ReadsGadgets(), ObjectKey.namespaced("ns", "missing")), TransientError);
    assert.equal(e.detail, "not-found: Gadget ns/missing not found");
  });
});

/** Keeps what it should not: the context of the last reconcile. */
class Leaky implements Reconciler {
  static last: Context | undefined;
  metadata(): Metadata {
    return new Metadata("leaky", "0.1.0", Gadget);
  }
  reconcile(key: ObjectKey, ctx: Context): Action {
    const attempt = ctx.attempt;
    ctx.deadlineRemainingMs();
    ctx.cancelled();
    ctx.settings();
    Leaky.last = ctx;
    if (key.name === "boom") throw new RangeError("spec");
    if (key.name === "wrong") return { requeue: true } as unknown as Action;
    return Action.requeueAfterSeconds(attempt + 1);
  }
}

describe("instance reuse: nothing of a reconcile's context survives it", () => {
  test("each reconcile sees its own context", () => {
    const r = new Leaky();
    cluster.setSettings({ v: 1 });
    assert.deepEqual(cluster.reconcile(r, ObjectKey.namespaced("ns", "a")), Action.requeueAfter(1000));
    const first = Leaky.last!;
    cluster.setAttempt(4);
    cluster.setSettings({ v: 2 });
    cluster.setDeadlineRemainingMs(250);
    cluster.setCancelled(true);
    assert.deepEqual(cluster.reconcile(r, ObjectKey.namespaced("ns", "b")), Action.requeueAfter(5000));
    assert.notEqual(Leaky.last, first);
    assert.throws(() => first.attempt, /reconcile that has returned/);
    assert.throws(() => Leaky.last!.settings(), /reconcile that has returned/);
  });

  test("the component contains unexpected exceptions", () => {
    const r = new Leaky();
    assert.throws(() => cluster.reconcile(r, ObjectKey.namespaced("ns", "boom")), RangeError);
    const e = assertThrows(() => run(r, ObjectKey.namespaced("ns", "boom"), true), TransientError);
    assert.equal(e.detail, "unexpected RangeError: spec");
    assert.equal(cluster.logs.at(-1)!.level, "error");
    assert.match(cluster.logs.at(-1)!.message, /RangeError: spec/);
    assert.throws(() => run(r, ObjectKey.namespaced("ns", "wrong"), true), PermanentError);
    assert.throws(() => Leaky.last!.cancelled(), /reconcile that has returned/);
    assert.ok(ReconcileError.of("odd") instanceof TransientError);
  });
});

test("a fake cluster reveals only what its entry allows", () => {
  cluster.setSecret("shown", "v4lue", true);
  cluster.setSecret("hidden", "s3cret");
  assert.equal(secrets.reveal("shown"), "v4lue");
  assert.throws(() => secrets.reveal("hidden"), (e: unknown) => e instanceof Forbidden && /reveal: true/.test(String(e)));
  assert.throws(() => secrets.reveal("nope"), NotFound);
  assert.equal(secrets.placeholder("t"), "${secret:t}");
});

test("a fake cluster answers HTTP requests with canned answers, each once, in order", () => {
  const url = "https://api.example.com/v1/zones/a";
  cluster.answerHttp("GET", url, 200, '{"ttl": 60}', [["content-type", "application/json"]]);
  cluster.answerHttp("GET", url, 404);
  const first = http.get(url, [["authorization", `Bearer ${secrets.placeholder("token")}`]]);
  assert.equal(first.status, 200);
  assert.deepEqual(first.json(), { ttl: 60 });
  assert.equal(first.header("Content-Type"), "application/json");
  assert.equal(http.get(url).status, 404);
  assert.throws(() => http.get(url), (e: unknown) => e instanceof http.HttpError && e instanceof TransientError);
  cluster.answerHttp("PUT", url, 200);
  assert.equal(http.send({ method: "PUT", url, body: "x" }).status, 200);
  assert.equal(cluster.httpRequests.length, 4);
  assert.deepEqual(cluster.httpRequests[0]!.headers, [["authorization", "Bearer ${secret:token}"]]);
  assert.deepEqual([...cluster.httpRequests[3]!.body], [120]);
  assert.throws(() => http.get("ftp://example.com/"), /must start with https:\/\/ or http:\/\//);
  assert.throws(() => new http.Response(200, [], new Uint8Array([0xff])).text(), http.HttpError);
  assert.throws(() => new http.Response(200, [], new TextEncoder().encode("{")).json(), /HTTP body/);
});

test("UTF-8 is encoded and decoded as TextEncoder and a fatal TextDecoder do", async () => {
  const utf8 = await import("../src/utf8.js");
  for (const text of ["", "plain", "é ß", "€ 語", "😀 𝄞", "a\u0000b", "x".repeat(10_000) + "é"]) {
    const bytes = utf8.encode(text);
    assert.deepEqual(bytes, new TextEncoder().encode(text), text.slice(0, 20));
    assert.equal(utf8.decode(bytes), text);
  }
  assert.deepEqual(utf8.encode("\ud800"), new TextEncoder().encode("\ud800"));
  for (const bad of [[0xff], [0xc0, 0x80], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xe2, 0x82], [0x80]]) {
    assert.equal(utf8.decode(Uint8Array.from(bad)), undefined, String(bad));
  }
});

test("calls without a host say what is missing", () => {
  cluster.close();
  assert.throws(() => gadgets().get("g"), /FakeCluster/);
});

// Keeps the type-only imports honest.
export type Unused = ApiError;
