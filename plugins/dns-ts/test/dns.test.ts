// The operator's behaviour, natively, against the SDK's fake API server and
// canned provider answers, with every call held to the plugin's declared
// permissions: `npm install && npm test`.
import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";

import { Api, conditions, finalizersOf, newObject, ObjectKey, TransientError } from "@wasmctrl/sdk";
import { FakeCluster } from "@wasmctrl/sdk/testing";

import { DnsReconciler, DNSRecord, type DNSRecordObject, FINALIZER } from "../src/dns.js";

const NS = "default";
const KEY = ObjectKey.namespaced(NS, "www");
const URL = "http://dns.test/zones/example.com/records/www";
const RECORD = { type: "A", value: "192.0.2.10", ttl: 300 };

let cluster: FakeCluster;
let records: Api<DNSRecordObject>;

beforeEach(() => {
  cluster = new FakeCluster();
  cluster.setSettings({ endpoint: "http://dns.test", zone: "example.com" });
  records = Api.namespaced<DNSRecordObject>(DNSRecord, NS);
  records.create(newObject<DNSRecordObject>(DNSRecord, "www", { spec: { name: "www", ...RECORD } }));
});

afterEach(() => cluster.close());

function ready() {
  return conditions.get(records.get("www").status?.conditions, "Ready");
}

test("a missing record is put with the secret placeholder and reported ready", () => {
  cluster.answerHttp("GET", URL, 404);
  cluster.answerHttp("PUT", URL, 200, JSON.stringify(RECORD));
  cluster.reconcile(new DnsReconciler(), KEY);
  const put = cluster.httpRequests.at(-1)!;
  assert.equal(put.method, "PUT");
  assert.deepEqual(JSON.parse(new TextDecoder().decode(put.body)), RECORD);
  for (const request of cluster.httpRequests) {
    assert.deepEqual(
      request.headers.find(([n]) => n === "authorization"),
      ["authorization", "Bearer ${secret:dns-token}"],
    );
  }
  assert.equal(ready()?.status, "True");
  assert.ok(finalizersOf(records.get("www")).includes(FINALIZER));
});

test("a record that matches is left alone", () => {
  cluster.answerHttp("GET", URL, 200, JSON.stringify(RECORD));
  cluster.reconcile(new DnsReconciler(), KEY);
  assert.deepEqual(
    cluster.httpRequests.map((r) => r.method),
    ["GET"],
  );
});

test("a provider error is transient and reported not ready", () => {
  cluster.answerHttp("GET", URL, 503);
  assert.throws(() => cluster.reconcile(new DnsReconciler(), KEY), TransientError);
  assert.equal(ready()?.status, "False");
  assert.equal(ready()?.reason, "ProviderError");
  assert.match(ready()?.message ?? "", /503/);
});

test("a request the fake has no answer for fails like a refused one", () => {
  assert.throws(() => cluster.reconcile(new DnsReconciler(), KEY), /no canned answer for GET/);
  assert.equal(ready()?.reason, "ProviderError");
});

test("deletion removes the remote record, then the finalizer", () => {
  cluster.answerHttp("GET", URL, 200, JSON.stringify(RECORD));
  cluster.reconcile(new DnsReconciler(), KEY);
  records.delete("www");
  cluster.answerHttp("DELETE", URL, 204);
  cluster.reconcile(new DnsReconciler(), KEY);
  assert.equal(cluster.httpRequests.at(-1)?.method, "DELETE");
  assert.equal(records.getOpt("www"), undefined);
});
