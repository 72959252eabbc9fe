"""The operator's behaviour, natively, against the SDK's fake API server —
the same cases as plugins/webapp/src/tests.rs, with every call held to the
plugin's declared permissions:

    cd plugins/webapp-py && PYTHONPATH=../../guest-sdk-python python3 -m unittest discover -s tests -t .
"""

import unittest

from wasmctrl_sdk import Action, AlreadyExists, Api, Conflict, ObjectKey, Patch, TransientError, conditions, kinds, objects
from wasmctrl_sdk.testing import FakeCluster

from wasmctrl_sdk.admission import Denied

from webapp import FINALIZER, MANAGED_BY, POLL, REGISTRY, WEBAPP, WebAppAdmission, WebAppReconciler

NS = "default"
URL = "http://hello.default.svc.cluster.local:80"
KEY = ObjectKey(NS, "hello")


def webapps():
    return Api.namespaced(WEBAPP, NS)


def deployments():
    return Api.namespaced(kinds.DEPLOYMENT, NS)


def registry():
    cm = Api.namespaced(kinds.CONFIG_MAP, NS).get_opt(REGISTRY)
    return None if cm is None else (cm.get("data") or {})


def create_hello():
    webapps().create(WEBAPP.new("hello", spec={"image": "nginx:1.27", "replicas": 2, "port": 80}))


def set_ready_replicas(n):
    deployments().patch_status("hello", Patch.merge({"status": {"replicas": n, "readyReplicas": n}}))


def ready(app):
    c = conditions.get(app["status"]["conditions"], "Ready")
    return c["status"], c["reason"]


class WebAppTest(unittest.TestCase):
    def setUp(self):
        self.cluster = FakeCluster()

    def tearDown(self):
        self.cluster.close()

    def reconcile(self):
        return self.cluster.reconcile(WebAppReconciler(), KEY)

    def test_a_webapp_becomes_an_owned_deployment_and_service(self):
        create_hello()
        self.assertEqual(self.reconcile(), Action.requeue_after(POLL))

        app = webapps().get("hello")
        owner = WEBAPP.controller_owner_ref(app)
        d = deployments().get("hello")
        self.assertEqual(d["spec"]["replicas"], 2)
        pod = d["spec"]["template"]["spec"]
        self.assertEqual(pod["containers"][0]["image"], "nginx:1.27")
        self.assertEqual(d["metadata"]["ownerReferences"], [owner])
        self.assertIs(owner["controller"], True)
        self.assertIs(owner["blockOwnerDeletion"], True)
        self.assertEqual(d["spec"]["selector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"])

        svc = Api.namespaced(kinds.SERVICE, NS).get("hello")
        self.assertEqual(svc["metadata"]["ownerReferences"], [owner])
        port = svc["spec"]["ports"][0]
        self.assertEqual((port["port"], port["targetPort"]), (80, "http"))

        self.assertEqual(objects.finalizers(app), [FINALIZER])
        self.assertEqual(app["status"]["observedGeneration"], 1)
        self.assertEqual(ready(app), ("False", "Progressing"))
        self.assertIsNone(registry(), "not listed until ready")
        events = self.cluster.events()
        self.assertEqual(len(events), 1)
        self.assertEqual(events[0].body["reason"], "Progressing")

    def test_ready_replicas_make_it_ready_and_listed(self):
        create_hello()
        self.reconcile()
        set_ready_replicas(1)
        self.assertEqual(self.reconcile(), Action.requeue_after(POLL))
        self.assertEqual(ready(webapps().get("hello"))[0], "False", "1/2 is not ready")

        set_ready_replicas(2)
        self.assertEqual(self.reconcile(), Action.done())
        app = webapps().get("hello")
        self.assertEqual(ready(app), ("True", "Available"))
        self.assertEqual(registry(), {"hello": URL})
        self.assertEqual(self.cluster.events()[-1].body["reason"], "Available")

        # Converged: another reconcile only re-applies (no-ops), writes no
        # status, no registry entry and no event.
        self.cluster.clear_calls()
        self.assertEqual(self.reconcile(), Action.done())
        self.assertEqual([c.verb for c in self.cluster.calls()], ["get", "patch", "patch", "get"])
        self.assertEqual(webapps().get("hello")["metadata"]["resourceVersion"], app["metadata"]["resourceVersion"])

    def test_the_registry_keeps_other_entries(self):
        Api.namespaced(kinds.CONFIG_MAP, NS).create({"metadata": {"name": REGISTRY}, "data": {"other": "http://other"}})
        create_hello()
        self.reconcile()
        set_ready_replicas(2)
        self.reconcile()
        self.assertEqual(registry(), {"hello": URL, "other": "http://other"})

    def test_the_deployment_follows_the_spec(self):
        create_hello()
        self.reconcile()
        set_ready_replicas(2)
        self.reconcile()

        webapps().patch("hello", Patch.merge({"spec": {"replicas": 3, "image": "nginx:1.28"}}))
        self.assertEqual(self.reconcile(), Action.requeue_after(POLL))
        d = deployments().get("hello")
        self.assertEqual(d["spec"]["replicas"], 3)
        self.assertEqual(d["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.28")
        app = webapps().get("hello")
        self.assertEqual(app["status"]["observedGeneration"], 2)
        self.assertEqual(ready(app), ("False", "Progressing"))
        self.assertEqual(conditions.get(app["status"]["conditions"], "Ready")["observedGeneration"], 2)
        self.assertEqual(registry(), {}, "unlisted while not ready")

    def test_a_deleted_or_edited_deployment_is_put_back(self):
        create_hello()
        self.reconcile()
        deployments().patch("hello", Patch.merge({"spec": {"replicas": 7}}))
        self.reconcile()
        self.assertEqual(deployments().get("hello")["spec"]["replicas"], 2)

        self.assertTrue(deployments().delete("hello"))
        self.assertIsNone(deployments().get_opt("hello"))
        self.reconcile()
        self.assertEqual(deployments().get("hello")["spec"]["replicas"], 2)

    def test_deleting_the_webapp_unlists_it_then_lets_it_go(self):
        create_hello()
        self.reconcile()
        set_ready_replicas(2)
        self.reconcile()
        self.assertIn("hello", registry())

        webapps().delete("hello")
        self.assertTrue(objects.is_deleting(webapps().get("hello")), "held by the finalizer")
        self.assertEqual(self.reconcile(), Action.done())

        self.assertEqual(registry(), {})
        self.assertIsNone(webapps().get_opt("hello"))
        self.assertIsNone(deployments().get_opt("hello"), "garbage-collected")
        self.assertIsNone(Api.namespaced(kinds.SERVICE, NS).get_opt("hello"))

        # The key comes once more (the deletion event): nothing to do.
        self.cluster.clear_calls()
        self.assertEqual(self.reconcile(), Action.done())
        self.assertEqual(len(self.cluster.calls()), 1)

    def test_deletion_before_it_was_ever_ready_ignores_a_missing_registry(self):
        create_hello()
        self.reconcile()
        webapps().delete("hello")
        self.assertEqual(self.reconcile(), Action.done())
        self.assertIsNone(webapps().get_opt("hello"))
        self.assertIsNone(registry())

    def test_a_lost_finalizer_race_is_retried(self):
        create_hello()
        self.cluster.fail_next("patch", Conflict("stale"))
        with self.assertRaises(TransientError):
            self.reconcile()
        self.assertEqual(self.reconcile(), Action.requeue_after(5))

    def test_the_declared_permissions_are_exactly_the_ones_used(self):
        create_hello()
        self.cluster.clear_calls()
        # The whole life of a WebApp, with every call checked against the
        # metadata (a call outside it would fail the reconcile).
        self.reconcile()
        set_ready_replicas(2)
        self.reconcile()
        webapps().delete("hello")
        self.reconcile()
        # Also: the registry created concurrently by someone else.
        create_hello()
        self.reconcile()
        set_ready_replicas(2)
        Api.namespaced(kinds.CONFIG_MAP, NS).delete(REGISTRY)
        self.cluster.fail_next("create", AlreadyExists("raced"))
        try:
            self.reconcile()
        except TransientError:
            pass

        self.assertEqual(self.cluster.unused_permissions(WebAppReconciler()), [])
        self.assertGreaterEqual(len(self.cluster.permissions_used()), 8)

    def test_a_missing_webapp_needs_nothing(self):
        self.assertEqual(self.reconcile(), Action.done())
        calls = self.cluster.calls()
        self.assertEqual((len(calls), calls[0].verb), (1, "get"))

    def test_a_spec_without_an_image_is_permanent(self):
        webapps().create(WEBAPP.new("hello", spec={"replicas": 1}))
        from wasmctrl_sdk import PermanentError

        with self.assertRaises(PermanentError):
            self.reconcile()


if __name__ == "__main__":
    unittest.main()


class AdmissionTest(unittest.TestCase):
    def setUp(self):
        self.cluster = FakeCluster()

    def tearDown(self):
        self.cluster.close()

    def app(self, image, replicas):
        app = WEBAPP.new("hello", spec={"image": image, "replicas": replicas})
        app["metadata"]["namespace"] = NS
        return app

    def test_a_webapp_outside_the_rules_is_refused_naming_each_field(self):
        self.assertEqual(self.cluster.validate_create(WebAppAdmission(), self.app("nginx:1.27", 3)), [])
        with self.assertRaises(Denied) as refused:
            self.cluster.validate_create(WebAppAdmission(), self.app("registry:5000/nginx", 51))
        self.assertEqual(refused.exception.code, 422)
        self.assertEqual(
            refused.exception.message,
            'WebApp.demo.wasmctrl.dev "hello" is invalid: [spec.replicas: Invalid value: 51: must be between 0 and 50, '
            'spec.image: Invalid value: "registry:5000/nginx": must name a tag (name:tag) or a digest (name@sha256:\u2026)]',
        )
        self.assertEqual([c.field for c in refused.exception.causes], ["spec.replicas", "spec.image"])

    def test_a_webapp_is_labelled_and_defaulted_and_keeps_everything_else(self):
        given = WEBAPP.new("hello", spec={"image": "nginx:1.27"})
        given["metadata"]["labels"] = {"team": "web"}
        admitted = self.cluster.default_object(WebAppAdmission(), given)
        self.assertEqual(admitted["metadata"]["labels"], {"team": "web", MANAGED_BY: "wasmctrl"})
        self.assertEqual(admitted["spec"], {"image": "nginx:1.27", "replicas": 1, "port": 80})
        self.assertEqual(given["metadata"]["labels"], {"team": "web"}, "the request's object is left as it was")
