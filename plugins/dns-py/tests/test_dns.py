"""The operator's behaviour, natively, against the SDK's fake API server and
canned provider answers, with every call held to the plugin's declared
permissions:

    cd plugins/dns-py && PYTHONPATH=../../guest-sdk-python python3 -m unittest discover -s tests -t .
"""

import json
import unittest

from wasmctrl_sdk import Api, ObjectKey, TransientError, conditions
from wasmctrl_sdk.testing import FakeCluster

from dns_operator import DNS_RECORD, FINALIZER, DnsReconciler

NS = "default"
KEY = ObjectKey(NS, "www")
URL = "http://dns.test/zones/example.com/records/www"
RECORD = {"type": "A", "value": "192.0.2.10", "ttl": 300}


class DnsTest(unittest.TestCase):
    def setUp(self):
        self.cluster = FakeCluster()
        self.cluster.set_settings({"endpoint": "http://dns.test", "zone": "example.com"})
        self.records = Api.namespaced(DNS_RECORD, NS)
        self.records.create(DNS_RECORD.new("www", spec={"name": "www", **RECORD}))

    def tearDown(self):
        self.cluster.close()

    def ready(self):
        status = self.records.get("www").get("status") or {}
        return conditions.get(status.get("conditions") or [], "Ready")

    def test_a_missing_record_is_put_with_the_secret_placeholder_and_reported_ready(self):
        self.cluster.answer_http("GET", URL, 404)
        self.cluster.answer_http("PUT", URL, 200, json.dumps(RECORD).encode())
        self.cluster.reconcile(DnsReconciler(), KEY)
        put = self.cluster.http_requests[-1]
        self.assertEqual((put.method, json.loads(put.body)), ("PUT", RECORD))
        for request in self.cluster.http_requests:
            self.assertIn(("authorization", "Bearer ${secret:dns-token}"), request.headers)
        self.assertEqual(self.ready()["status"], "True")
        self.assertIn(FINALIZER, self.records.get("www")["metadata"]["finalizers"])

    def test_a_record_that_matches_is_left_alone(self):
        self.cluster.answer_http("GET", URL, 200, json.dumps(RECORD).encode())
        self.cluster.reconcile(DnsReconciler(), KEY)
        self.assertEqual([r.method for r in self.cluster.http_requests], ["GET"])

    def test_a_provider_error_is_transient_and_reported_not_ready(self):
        self.cluster.answer_http("GET", URL, 503)
        with self.assertRaises(TransientError):
            self.cluster.reconcile(DnsReconciler(), KEY)
        ready = self.ready()
        self.assertEqual((ready["status"], ready["reason"]), ("False", "ProviderError"))
        self.assertIn("503", ready["message"])

    def test_deletion_removes_the_remote_record_then_the_finalizer(self):
        self.cluster.answer_http("GET", URL, 200, json.dumps(RECORD).encode())
        self.cluster.reconcile(DnsReconciler(), KEY)
        self.records.delete("www")
        self.cluster.answer_http("DELETE", URL, 204)
        self.cluster.reconcile(DnsReconciler(), KEY)
        self.assertEqual(self.cluster.http_requests[-1].method, "DELETE")
        self.assertIsNone(self.records.get_opt("www"))


if __name__ == "__main__":
    unittest.main()
