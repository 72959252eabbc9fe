// The operator's behaviour, natively, against the SDK's fake API server —
// the same cases as plugins/webapp/src/tests.rs, with every call held to
// the plugin's declared permissions: `npm install && npm test`.
import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";

import {
  Action,
  admission,
  AlreadyExists,
  Api,
  conditions,
  Conflict,
  controllerOwnerRef,
  finalizersOf,
  isDeleting,
  kinds,
  type KubeObject,
  newObject,
  ObjectKey,
  Patch,
  PermanentError,
  TransientError,
} from "@wasmctrl/sdk";
import { FakeCluster } from "@wasmctrl/sdk/testing";

import {
  FINALIZER,
  MANAGED_BY,
  POLL_MS,
  REGISTRY,
  WebApp,
  WebAppAdmission,
  type WebAppObject,
  WebAppReconciler,
} from "../src/webapp.js";

type Deployment = KubeObject<
  {
    replicas: number;
    selector: { matchLabels: Record<string, string> };
    template: { metadata: { labels: Record<string, string> }; spec: { containers: { image: string }[] } };
  },
  { readyReplicas?: number }
>;
type Service = KubeObject<{ ports: { port: number; targetPort: string }[] }>;
type ConfigMap = KubeObject & { data?: Record<string, string> };

const NS = "default";
const URL = "http://hello.default.svc.cluster.local:80";
const KEY = ObjectKey.namespaced(NS, "hello");

const webapps = () => Api.namespaced<WebAppObject>(WebApp, NS);
const deployments = () => Api.namespaced<Deployment>(kinds.Deployment, NS);
const services = () => Api.namespaced<Service>(kinds.Service, NS);
const configmaps = () => Api.namespaced<ConfigMap>(kinds.ConfigMap, NS);

function registry(): Record<string, string> | undefined {
  const cm = configmaps().getOpt(REGISTRY);
  return cm === undefined ? undefined : (cm.data ?? {});
}

function createHello(): void {
  webapps().create(newObject<WebAppObject>(WebApp, "hello", { spec: { image: "nginx:1.27", replicas: 2, port: 80 } }));
}

function setReadyReplicas(n: number): void {
  deployments().patchStatus("hello", Patch.merge({ status: { replicas: n, readyReplicas: n } }));
}

function ready(app: WebAppObject): [string, string] {
  const c = conditions.get(app.status?.conditions, "Ready");
  assert.ok(c, "a Ready condition");
  return [c.status, c.reason];
}

let cluster: FakeCluster;
beforeEach(() => {
  cluster = new FakeCluster();
});
afterEach(() => {
  cluster.close();
});

const reconcile = (): Action => cluster.reconcile(new WebAppReconciler(), KEY);

test("a webapp becomes an owned deployment and service", () => {
  createHello();
  assert.deepEqual(reconcile(), Action.requeueAfter(POLL_MS));

  const app = webapps().get("hello");
  const owner = controllerOwnerRef(WebApp, app)!;
  const d = deployments().get("hello");
  assert.equal(d.spec!.replicas, 2);
  assert.equal(d.spec!.template.spec.containers[0]!.image, "nginx:1.27");
  assert.deepEqual(d.metadata!.ownerReferences, [owner]);
  assert.equal(owner.controller, true);
  assert.equal(owner.blockOwnerDeletion, true);
  assert.deepEqual(d.spec!.selector.matchLabels, d.spec!.template.metadata.labels);

  const svc = services().get("hello");
  assert.deepEqual(svc.metadata!.ownerReferences, [owner]);
  const port = svc.spec!.ports[0]!;
  assert.deepEqual([port.port, port.targetPort], [80, "http"]);

  assert.deepEqual(finalizersOf(app), [FINALIZER]);
  assert.equal(app.status!.observedGeneration, 1);
  assert.deepEqual(ready(app), ["False", "Progressing"]);
  assert.equal(registry(), undefined, "not listed until ready");
  const events = cluster.events();
  assert.equal(events.length, 1);
  assert.equal((events[0]!.body as { reason: string }).reason, "Progressing");
});

test("ready replicas make it ready and listed", () => {
  createHello();
  reconcile();
  setReadyReplicas(1);
  assert.deepEqual(reconcile(), Action.requeueAfter(POLL_MS));
  assert.equal(ready(webapps().get("hello"))[0], "False", "1/2 is not ready");

  setReadyReplicas(2);
  assert.deepEqual(reconcile(), Action.done());
  const app = webapps().get("hello");
  assert.deepEqual(ready(app), ["True", "Available"]);
  assert.deepEqual(registry(), { hello: URL });
  assert.equal((cluster.events().at(-1)!.body as { reason: string }).reason, "Available");

  // Converged: another reconcile only re-applies (no-ops), writes no status,
  // no registry entry and no event.
  cluster.clearCalls();
  assert.deepEqual(reconcile(), Action.done());
  assert.deepEqual(
    cluster.calls().map((c) => c.verb),
    ["get", "patch", "patch", "get"],
  );
  assert.equal(webapps().get("hello").metadata!.resourceVersion, app.metadata!.resourceVersion);
});

test("the registry keeps other entries", () => {
  configmaps().create({ metadata: { name: REGISTRY }, data: { other: "http://other" } });
  createHello();
  reconcile();
  setReadyReplicas(2);
  reconcile();
  assert.deepEqual(registry(), { hello: URL, other: "http://other" });
});

test("the deployment follows the spec", () => {
  createHello();
  reconcile();
  setReadyReplicas(2);
  reconcile();

  webapps().patch("hello", Patch.merge({ spec: { replicas: 3, image: "nginx:1.28" } }));
  assert.deepEqual(reconcile(), Action.requeueAfter(POLL_MS));
  const d = deployments().get("hello");
  assert.equal(d.spec!.replicas, 3);
  assert.equal(d.spec!.template.spec.containers[0]!.image, "nginx:1.28");
  const app = webapps().get("hello");
  assert.equal(app.status!.observedGeneration, 2);
  assert.deepEqual(ready(app), ["False", "Progressing"]);
  assert.equal(conditions.get(app.status!.conditions, "Ready")!.observedGeneration, 2);
  assert.deepEqual(registry(), {}, "unlisted while not ready");
});

test("a deleted or edited deployment is put back", () => {
  createHello();
  reconcile();
  deployments().patch("hello", Patch.merge({ spec: { replicas: 7 } }));
  reconcile();
  assert.equal(deployments().get("hello").spec!.replicas, 2);

  assert.equal(deployments().delete("hello"), true);
  assert.equal(deployments().getOpt("hello"), undefined);
  reconcile();
  assert.equal(deployments().get("hello").spec!.replicas, 2);
});

test("deleting the webapp unlists it, then lets it go", () => {
  createHello();
  reconcile();
  setReadyReplicas(2);
  reconcile();
  assert.ok("hello" in registry()!);

  webapps().delete("hello");
  assert.ok(isDeleting(webapps().get("hello")), "held by the finalizer");
  assert.deepEqual(reconcile(), Action.done());

  assert.deepEqual(registry(), {});
  assert.equal(webapps().getOpt("hello"), undefined);
  assert.equal(deployments().getOpt("hello"), undefined, "garbage-collected");
  assert.equal(services().getOpt("hello"), undefined);

  // The key comes once more (the deletion event): nothing to do.
  cluster.clearCalls();
  assert.deepEqual(reconcile(), Action.done());
  assert.equal(cluster.calls().length, 1);
});

test("deletion before it was ever ready ignores a missing registry", () => {
  createHello();
  reconcile();
  webapps().delete("hello");
  assert.deepEqual(reconcile(), Action.done());
  assert.equal(webapps().getOpt("hello"), undefined);
  assert.equal(registry(), undefined);
});

test("a lost finalizer race is retried", () => {
  createHello();
  cluster.failNext("patch", new Conflict("stale"));
  assert.throws(reconcile, TransientError);
  assert.deepEqual(reconcile(), Action.requeueAfterSeconds(5));
});

test("the declared permissions are exactly the ones used", () => {
  createHello();
  cluster.clearCalls();
  // The whole life of a WebApp, with every call checked against the
  // metadata (a call outside it would fail the reconcile).
  reconcile();
  setReadyReplicas(2);
  reconcile();
  webapps().delete("hello");
  reconcile();
  // Also: the registry created concurrently by someone else.
  createHello();
  reconcile();
  setReadyReplicas(2);
  configmaps().delete(REGISTRY);
  cluster.failNext("create", new AlreadyExists("raced"));
  assert.throws(reconcile, TransientError);

  assert.deepEqual(cluster.unusedPermissions(new WebAppReconciler()), []);
  assert.ok(cluster.permissionsUsed().length >= 8);
});

test("a missing webapp needs nothing", () => {
  assert.deepEqual(reconcile(), Action.done());
  const calls = cluster.calls();
  assert.deepEqual([calls.length, calls[0]!.verb], [1, "get"]);
});

test("a spec without an image is permanent", () => {
  webapps().create(newObject<WebAppObject>(WebApp, "hello", { spec: { replicas: 1 } as never }));
  assert.throws(reconcile, PermanentError);
});

test("a webapp outside the rules is refused naming each field", () => {
  const app = (image: string, replicas: number) => {
    const a = newObject<WebAppObject>(WebApp, "hello", { spec: { image, replicas } });
    a.metadata!.namespace = "default";
    return a;
  };
  assert.deepEqual(cluster.validateCreate(new WebAppAdmission(), app("nginx:1.27", 3)), []);
  assert.throws(
    () => cluster.validateCreate(new WebAppAdmission(), app("registry:5000/nginx", 51)),
    (e: unknown) => {
      assert.ok(e instanceof admission.Denied);
      assert.equal(e.code, 422);
      assert.equal(
        e.message,
        'WebApp.demo.wasmctrl.dev "hello" is invalid: [spec.replicas: Invalid value: 51: must be between 0 and 50, ' +
          'spec.image: Invalid value: "registry:5000/nginx": must name a tag (name:tag) or a digest (name@sha256:…)]',
      );
      assert.deepEqual(
        e.causes.map((c) => c.field),
        ["spec.replicas", "spec.image"],
      );
      return true;
    },
  );
});

test("a webapp is labelled and defaulted and keeps everything else", () => {
  const given = newObject<WebAppObject>(WebApp, "hello", { spec: { image: "nginx:1.27" } });
  given.metadata!.labels = { team: "web" };
  const admitted = cluster.defaultObject(new WebAppAdmission(), given);
  assert.deepEqual(admitted.metadata.labels, { team: "web", [MANAGED_BY]: "wasmctrl" });
  assert.deepEqual(admitted.spec, { image: "nginx:1.27", replicas: 1, port: 80 });
  assert.deepEqual(given.metadata!.labels, { team: "web" }, "the request's object is left as it was");
});
