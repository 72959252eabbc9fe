"""The SDK's behaviour, natively, against its FakeCluster (the Python
counterpart of guest-sdk/src/tests.rs): `python3 -m unittest discover -s tests`."""

import json
import re
import unittest
from datetime import timedelta

from wasmctrl_sdk import (
    Action,
    AlreadyExists,
    Api,
    ApiError,
    Apply,
    Cleanup,
    Conflict,
    EventType,
    Forbidden,
    Invalid,
    Kind,
    Metadata,
    NotFound,
    ObjectKey,
    Other,
    Patch,
    PermanentError,
    Reconciler,
    Recorder,
    Serialization,
    Timeout,
    TransientError,
    Unavailable,
    WatchMapping,
    conditions,
    escape_pointer,
    export,
    finalizer,
    kinds,
    log,
    objects,
    op_remove,
    op_replace,
    op_test,
)
from wasmctrl_sdk import _host
from wasmctrl_sdk.finalizer import _plan
from wasmctrl_sdk.reconciler import run
from wasmctrl_sdk.testing import FakeCluster, plural

GADGET = Kind("test.wasmctrl.dev", "v1", "Gadget", "gadgets")
FIN = "test.wasmctrl.dev/cleanup"
DELETED = "2024-01-01T00:00:00Z"


def gadgets(ns="ns"):
    return Api.namespaced(GADGET, ns)


def gadget(meta, size=1):
    return {"metadata": meta, "spec": {"size": size}}


class ClusterTest(unittest.TestCase):
    def setUp(self):
        self.cluster = FakeCluster()

    def tearDown(self):
        self.cluster.close()


class KindsTest(unittest.TestCase):
    def test_kind_facts(self):
        self.assertEqual(GADGET.api_version, "test.wasmctrl.dev/v1")
        self.assertEqual(kinds.CONFIG_MAP.api_version, "v1")
        self.assertEqual(GADGET.new("g", spec={"size": 1}),
                         {"apiVersion": "test.wasmctrl.dev/v1", "kind": "Gadget",
                          "metadata": {"name": "g"}, "spec": {"size": 1}})

    def test_controller_owner_ref_needs_a_uid(self):
        self.assertIsNone(GADGET.controller_owner_ref(gadget({"name": "g"})))
        self.assertEqual(GADGET.controller_owner_ref(gadget({"name": "g", "uid": "u1"})),
                         {"apiVersion": "test.wasmctrl.dev/v1", "kind": "Gadget", "name": "g",
                          "uid": "u1", "controller": True, "blockOwnerDeletion": True})

    def test_plural_follows_kubernetes_defaults(self):
        for kind, expected in [("Deployment", "deployments"), ("Ingress", "ingresses"),
                               ("Policy", "policies"), ("Gateway", "gateways"), ("Box", "boxes")]:
            self.assertEqual(plural(kind), expected)

    def test_keys(self):
        key = ObjectKey.namespaced("ns", "a")
        self.assertEqual((str(key), key.require_namespace()), ("ns/a", "ns"))
        with self.assertRaises(PermanentError):
            ObjectKey.cluster("n").require_namespace()
        self.assertEqual(str(ObjectKey.cluster("n")), "n")
        self.assertEqual(objects.key({"metadata": {"name": "a", "namespace": "ns"}}), key)


class ActionTest(unittest.TestCase):
    def test_requeue_after_is_whole_milliseconds_never_zero(self):
        self.assertEqual(Action.requeue_after(5).requeue_after_ms, 5000)
        self.assertEqual(Action.requeue_after(timedelta(milliseconds=1500)).requeue_after_ms, 1500)
        self.assertEqual(Action.requeue_after(0.0001).requeue_after_ms, 1)
        self.assertEqual(Action.requeue_after(0), Action.done())
        self.assertEqual(Action.requeue(), Action(requeue_=True))
        with self.assertRaises(ValueError):
            Action.requeue_after(-1)


class ApiTest(ClusterTest):
    def test_get_opt_maps_not_found_to_none(self):
        api = Api.namespaced(kinds.CONFIG_MAP, "ns")
        created = api.create({"metadata": {"name": "there"}})
        self.assertTrue(created["metadata"]["uid"])
        self.assertEqual(objects.name(api.get_opt("there")), "there")
        self.assertIsNone(api.get_opt("missing"))
        with self.assertRaises(NotFound):
            api.get("missing")
        calls = self.cluster.calls()
        self.assertEqual(calls[1].kind, kinds.CONFIG_MAP.gvk)
        self.assertEqual((calls[1].verb, calls[1].namespace), ("get", "ns"))
        self.assertEqual(calls[0].body["kind"], "ConfigMap", "typed: apiVersion/kind come from the Kind")
        with self.assertRaises(AlreadyExists):
            api.create({"metadata": {"name": "there"}})

    def test_a_reply_of_the_wrong_shape_is_a_serialization_error(self):
        class Lying:
            def get(self, *_):
                return "[1, 2]"

        _host.install(Lying())
        with self.assertRaises(Serialization) as e:
            gadgets().get("g")
        self.assertTrue(e.exception.to_reconcile_error().permanent)
        with self.assertRaises(Serialization):
            gadgets().create({"metadata": {"name": "g"}, "spec": {"when": object()}})

    def test_list_filters_by_namespace_and_labels(self):
        for ns, name, labels in [("a", "one", {"app": "x"}), ("a", "two", {"app": "y"}),
                                 ("b", "three", {"app": "x", "tier": "web"})]:
            Api.namespaced(GADGET, ns).create(gadget({"name": name, "labels": labels}))
        names = lambda items: [objects.name(i) for i in items]  # noqa: E731
        self.assertEqual(names(Api.all(GADGET).list("app=x")), ["one", "three"])
        self.assertEqual(names(Api.namespaced(GADGET, "a").list()), ["one", "two"])
        self.assertEqual(names(Api.all(GADGET).list("app!=y,tier")), ["three"])
        last = self.cluster.calls()[-1]
        self.assertEqual((last.verb, last.namespace, last.body), ("list", None, "app!=y,tier"))

    def test_apply_sends_the_typed_object_as_a_server_side_apply(self):
        deployments = Api.namespaced(kinds.DEPLOYMENT, "ns")
        d = {"metadata": {"name": "web"}, "spec": {"replicas": 2}}
        stored = deployments.apply(d, "mgr", True)
        self.assertEqual(stored["metadata"]["generation"], 1)
        call = self.cluster.calls()[0]
        self.assertEqual((call.verb, call.name, call.patch), ("patch", "web", "apply mgr force=true"))
        self.assertEqual(call.kind, kinds.DEPLOYMENT.gvk)
        self.assertEqual((call.body["apiVersion"], call.body["kind"]), ("apps/v1", "Deployment"))
        d["spec"]["replicas"] = 3
        stored = deployments.apply(d, "mgr", True)
        self.assertEqual((stored["spec"]["replicas"], stored["metadata"]["generation"]), (3, 2))
        with self.assertRaises(Invalid):
            deployments.apply({"spec": {}}, "mgr", True)

    def test_apply_status_sends_only_type_meta_name_and_status(self):
        gadgets().create(gadget({"name": "g"}))
        status = {"conditions": [conditions.new("Ready", True, "Done", "")]}
        stored = gadgets().apply_status("g", status, "mgr")
        self.assertEqual(stored["status"], status)
        self.assertEqual(stored["metadata"]["generation"], 1, "status writes keep the generation")
        call = self.cluster.calls()[-1]
        self.assertEqual((call.verb, call.patch), ("patch-status", "apply mgr force=false"))
        self.assertEqual(call.body["metadata"], {"name": "g"})
        self.assertEqual(call.body["kind"], "Gadget")
        self.assertNotIn("spec", call.body)

    def test_patches_serialize_as_their_kind(self):
        gadgets().create(gadget({"name": "g"}))
        self.assertEqual(gadgets().patch("g", Patch.merge({"spec": {"size": 2}}))["spec"]["size"], 2)
        patched = gadgets().patch("g", Patch.json([op_test("/spec/size", 2), op_replace("/spec/size", 3)]))
        self.assertEqual(patched["spec"]["size"], 3)
        calls = self.cluster.calls()
        self.assertEqual((calls[1].patch, calls[2].patch), ("merge", "json"))
        self.assertEqual(calls[2].body, [{"op": "test", "path": "/spec/size", "value": 2},
                                         {"op": "replace", "path": "/spec/size", "value": 3}])
        with self.assertRaises(Invalid):
            gadgets().patch("g", Patch.json([op_test("/spec/size", 2)]))
        self.assertEqual(escape_pointer("a/b~c"), "a~1b~0c")

    def test_json_patch_test_tells_booleans_from_numbers(self):
        gadgets().create(gadget({"name": "g"}, size=1))
        with self.assertRaises(Invalid):
            gadgets().patch("g", Patch.json([op_test("/spec/size", True)]))

    def test_replace_with_a_stale_resource_version_conflicts(self):
        created = gadgets().create(gadget({"name": "g"}))
        first = json.loads(json.dumps(created))
        first["spec"]["size"] = 2
        gadgets().replace("g", first)
        second = json.loads(json.dumps(created))
        second["spec"]["size"] = 3
        with self.assertRaises(Conflict):
            gadgets().replace("g", second)

    def test_replace_status_changes_only_the_status(self):
        created = gadgets().create(gadget({"name": "g"}))
        created["spec"]["size"] = 9
        created["status"] = {"phase": "Up"}
        stored = gadgets().replace_status("g", created)
        self.assertEqual((stored["spec"]["size"], stored["status"]), (1, {"phase": "Up"}))
        self.assertEqual(self.cluster.calls()[-1].verb, "replace-status")

    def test_delete_reports_whether_the_object_existed(self):
        gadgets().create(gadget({"name": "g"}))
        self.assertTrue(gadgets().delete("g"))
        self.assertFalse(gadgets().delete("g"))

    def test_cluster_scoped_kinds_have_no_namespaced_handle(self):
        with self.assertRaises(ValueError):
            Api.namespaced(kinds.NAMESPACE, "ns")
        Api.all(kinds.NAMESPACE).create({"metadata": {"name": "team"}})
        self.assertEqual(Api.all(kinds.NAMESPACE).get("team")["kind"], "Namespace")
        self.assertNotIn("namespace", Api.all(kinds.NAMESPACE).get("team")["metadata"])

    def test_api_errors_are_transient_except_invalid_forbidden_and_serialization(self):
        for cls in (NotFound, Conflict, AlreadyExists, Timeout, Unavailable, Other):
            self.assertIsInstance(cls("").to_reconcile_error(), TransientError, cls)
        for cls in (Invalid, Forbidden, Serialization):
            self.assertIsInstance(cls("").to_reconcile_error(), PermanentError, cls)
        self.assertEqual(str(Forbidden("x")), "forbidden: x")
        self.assertEqual(Forbidden("x").to_reconcile_error().message, "forbidden: x")


class FinalizerTest(ClusterTest):
    def test_plan_guards_every_write_with_a_test(self):
        self.assertEqual(_plan(gadget({"name": "g"}), FIN),
                         ("add", [{"op": "test", "path": "/metadata/finalizers", "value": None},
                                  {"op": "add", "path": "/metadata/finalizers", "value": [FIN]}]))
        self.assertEqual(_plan(gadget({"name": "g", "finalizers": ["a"]}), FIN),
                         ("add", [{"op": "test", "path": "/metadata/finalizers", "value": ["a"]},
                                  {"op": "add", "path": "/metadata/finalizers/-", "value": FIN}]))
        self.assertEqual(_plan(gadget({"name": "g", "finalizers": [FIN]}), FIN), ("apply", []))
        deleting = gadget({"name": "g", "finalizers": ["a", FIN], "deletionTimestamp": DELETED})
        self.assertEqual(_plan(deleting, FIN),
                         ("cleanup", [{"op": "test", "path": "/metadata/finalizers/1", "value": FIN},
                                      {"op": "remove", "path": "/metadata/finalizers/1"}]))
        not_ours = gadget({"name": "g", "finalizers": ["a"], "deletionTimestamp": DELETED})
        self.assertEqual(_plan(not_ours, FIN), ("nothing", []))

    def test_adds_itself_then_applies_the_patched_object(self):
        created = gadgets().create(gadget({"name": "g"}))
        seen = []

        def reconcile(event):
            self.assertIsInstance(event, Apply)
            seen.append(objects.finalizers(event.object))
            return Action.requeue()

        self.assertEqual(finalizer(gadgets(), FIN, created, reconcile), Action.requeue())
        self.assertEqual(seen, [[FIN]])
        calls = self.cluster.calls()
        self.assertEqual((len(calls), calls[1].verb, calls[1].patch), (2, "patch", "json"))

    def test_runs_cleanup_then_removes_itself_and_the_object_goes(self):
        gadgets().create(gadget({"name": "g", "finalizers": ["other", FIN]}))
        gadgets().delete("g")
        deleting = gadgets().get("g")
        self.assertTrue(objects.is_deleting(deleting))
        cleaned = []

        def reconcile(event):
            match event:
                case Cleanup(obj):
                    cleaned.append(objects.name(obj))
                    return Action.done()
                case Apply(_):
                    self.fail("deleting")

        self.assertEqual(finalizer(gadgets(), FIN, deleting, reconcile), Action.done())
        self.assertEqual(cleaned, ["g"])
        self.assertEqual(objects.finalizers(gadgets().get("g")), ["other"])
        gadgets().patch("g", Patch.json([op_remove("/metadata/finalizers/0")]))
        self.assertIsNone(gadgets().get_opt("g"))

    def test_keeps_itself_when_cleanup_fails(self):
        gadgets().create(gadget({"name": "g", "finalizers": [FIN]}))
        gadgets().delete("g")
        deleting = gadgets().get("g")
        self.cluster.clear_calls()

        def reconcile(event):
            raise TransientError("external API down")

        with self.assertRaises(TransientError) as e:
            finalizer(gadgets(), FIN, deleting, reconcile)
        self.assertEqual(e.exception.message, "external API down")
        self.assertEqual(self.cluster.calls(), [])
        self.assertIsNotNone(gadgets().get_opt("g"))

    def test_turns_a_lost_race_into_a_transient_error(self):
        stale = gadgets().create(gadget({"name": "g"}))
        # Someone else adds a finalizer after we read the object.
        gadgets().patch("g", Patch.merge({"metadata": {"finalizers": ["theirs"]}}))
        never = lambda event: self.fail("not reached")  # noqa: E731
        with self.assertRaises(TransientError):
            finalizer(gadgets(), FIN, stale, never)
        self.assertEqual(objects.finalizers(gadgets().get("g")), ["theirs"],
                         "the other writer's finalizer is not clobbered")

        cluster = FakeCluster()
        fresh = gadgets().create(gadget({"name": "g"}))
        cluster.fail_next("patch", Conflict("stale"))
        with self.assertRaises(TransientError):
            finalizer(gadgets(), FIN, fresh, never)
        cluster.fail_next("patch", Forbidden("no patch"))
        with self.assertRaises(PermanentError):
            finalizer(gadgets(), FIN, fresh, never)

    def test_leaves_a_deleting_object_without_it_alone(self):
        deleting = gadget({"name": "g", "deletionTimestamp": DELETED})
        self.assertEqual(finalizer(gadgets(), FIN, deleting, lambda e: self.fail("not ours")), Action.done())
        self.assertEqual(self.cluster.calls(), [])


class GarbageCollectionTest(ClusterTest):
    def test_deleting_an_owner_deletes_what_it_controls(self):
        owner = gadgets().create(gadget({"name": "g"}))
        configmaps = Api.namespaced(kinds.CONFIG_MAP, "ns")
        configmaps.create({"metadata": {"name": "owned", "ownerReferences": [GADGET.controller_owner_ref(owner)]}})
        gadgets().delete("g")
        self.assertIsNone(configmaps.get_opt("owned"))


class ConditionsTest(unittest.TestCase):
    def test_time_moves_only_when_the_status_changes(self):
        items = []
        first = {**conditions.new("Ready", False, "Progressing", "0/2"), "lastTransitionTime": "t100"}
        self.assertTrue(conditions.set(items, first))
        self.assertFalse(conditions.is_true(items, "Ready"))

        # Same status, new message and generation: updated, time kept.
        again = {**conditions.new("Ready", False, "Progressing", "1/2", observed_generation=2),
                 "lastTransitionTime": "t200"}
        self.assertTrue(conditions.set(items, again))
        ready = conditions.get(items, "Ready")
        self.assertEqual((ready["lastTransitionTime"], ready["message"]), ("t100", "1/2"))
        self.assertEqual(ready["observedGeneration"], 2)

        # Nothing new: no change.
        self.assertFalse(conditions.set(items, again))

        # Status flips: the time moves; no observedGeneration removes it.
        up = {**conditions.new("Ready", True, "Available", "2/2"), "lastTransitionTime": "t300"}
        self.assertTrue(conditions.set(items, up))
        self.assertTrue(conditions.is_true(items, "Ready"))
        self.assertEqual(conditions.get(items, "Ready")["lastTransitionTime"], "t300")
        self.assertNotIn("observedGeneration", conditions.get(items, "Ready"))

        # Other types are independent.
        self.assertTrue(conditions.set(items, conditions.new("Degraded", False, "AsExpected", "")))
        self.assertEqual(len(items), 2)
        self.assertTrue(conditions.remove(items, "Degraded"))
        self.assertFalse(conditions.remove(items, "Degraded"))

    def test_times_are_whole_seconds_in_rfc3339(self):
        c = conditions.new("Ready", True, "Available", "")
        self.assertRegex(c["lastTransitionTime"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertEqual(c["status"], "True")
        self.assertNotIn("observedGeneration", c)


class EventsAndLogsTest(ClusterTest):
    def test_recorder_publishes_regarding_the_object(self):
        g = gadget({"name": "g", "namespace": "ns"})
        Recorder(GADGET, g).publish(EventType.WARNING, "Failed", "Reconcile", "it broke")
        event = self.cluster.events()[0]
        self.assertEqual(event.kind, GADGET.gvk)
        self.assertEqual((event.namespace, event.name), ("ns", "g"))
        self.assertEqual(event.body, {"type": "Warning", "reason": "Failed", "action": "Reconcile", "note": "it broke"})
        Recorder.for_key(GADGET, ObjectKey.cluster("c")).publish(EventType.NORMAL, "Seen", "Reconcile", "")
        self.assertEqual((self.cluster.events()[1].namespace, self.cluster.events()[1].body["type"]), (None, "Normal"))

    def test_log_enabled_asks_the_host(self):
        self.assertTrue(log.enabled("debug"))
        self.cluster.log_level = "info"
        self.assertFalse(log.enabled("debug"))
        self.assertTrue(log.enabled("warn"))
        with self.assertRaises(ValueError):
            log.enabled("loud")

    def test_logs_go_to_the_host_with_fields(self):
        log.info("hello", key="ns/a", n=3)
        import logging
        logger = logging.getLogger("wasmctrl-test")
        logger.addHandler(log.Handler())
        logger.warning("careful %s", "now")
        self.assertEqual([(l.level, l.message, l.fields) for l in self.cluster.logs],
                         [("info", "hello", [("key", "ns/a"), ("n", "3")]),
                          ("warn", "careful now", [("logger", "wasmctrl-test")])])


class ReadsGadgets(Reconciler):
    def metadata(self):
        return (Metadata("reads", "0.1.0", GADGET)
                .owns(kinds.DEPLOYMENT)
                .watches(kinds.CONFIG_MAP, WatchMapping.label("gadget"))
                .permission(GADGET.group, [GADGET.plural], ["get"]))

    def reconcile(self, key, ctx):
        api = Api.namespaced(GADGET, key.require_namespace())
        g = api.get(key.name)
        if ctx.settings()["write"]:
            api.apply_status(objects.name(g), {}, "reads", True)
        return Action.requeue_after(ctx.attempt)


class ReconcileTest(ClusterTest):
    def test_reconcile_is_held_to_the_declared_permissions(self):
        gadgets().create(gadget({"name": "g"}))
        key = ObjectKey.namespaced("ns", "g")
        self.cluster.set_settings({"write": False})
        self.cluster.set_attempt(7)
        self.assertEqual(self.cluster.reconcile(ReadsGadgets(), key), Action.requeue_after(7))

        self.cluster.set_settings({"write": True})
        self.cluster.clear_calls()
        with self.assertRaises(PermanentError) as e:
            self.cluster.reconcile(ReadsGadgets(), key)
        self.assertIn("gadgets/status", e.exception.message)
        self.assertTrue(e.exception.message.startswith("forbidden: "), e.exception.message)
        self.assertEqual(self.cluster.permissions_used(),
                         [("get", "test.wasmctrl.dev", "gadgets"),
                          ("patch", "test.wasmctrl.dev", "gadgets/status")])
        self.assertEqual(self.cluster.unused_permissions(ReadsGadgets()), [])
        # Outside a reconcile (setting the scene), nothing is checked.
        gadgets().apply_status("g", {}, "test", True)

    def test_metadata_names_kinds_and_mappings(self):
        m = ReadsGadgets().metadata()
        self.assertEqual(m.for_.kind, "Gadget")
        self.assertEqual(m.owned[0].group, "apps")
        self.assertEqual(m.watched[0][1], WatchMapping.label("gadget"))
        self.assertEqual(list(m.permissions[0].resources), ["gadgets"])
        with self.assertRaises(TypeError):
            Metadata("x", "1", GADGET).permission("", "configmaps", ["get"])

    def test_invalid_settings_are_permanent(self):
        gadgets().create(gadget({"name": "g"}))
        self.cluster._settings = "{not json"
        with self.assertRaises(PermanentError) as e:
            self.cluster.reconcile(ReadsGadgets(), ObjectKey("ns", "g"))
        self.assertIn("invalid plugin settings", e.exception.message)

    def test_an_escaping_api_error_follows_the_transient_rule(self):
        with self.assertRaises(TransientError) as e:
            self.cluster.reconcile(ReadsGadgets(), ObjectKey("ns", "missing"))
        self.assertEqual(e.exception.message, "not-found: Gadget ns/missing not found")


class Leaky(Reconciler):
    """Keeps what it should not: the context of the last reconcile."""

    last = None

    def metadata(self):
        return Metadata("leaky", "0.1.0", GADGET)

    def reconcile(self, key, ctx):
        seen = (ctx.attempt, ctx.deadline_remaining(), ctx.cancelled(), ctx.settings())
        Leaky.last = ctx
        if key.name == "boom":
            raise KeyError("spec")
        if key.name == "wrong":
            return {"requeue": True}
        return Action.requeue_after(seen[0] + 1)


class InstanceReuseTest(ClusterTest):
    """One instance, many reconciles (instance mode `reuse`): nothing of a
    reconcile's context survives it."""

    def test_each_reconcile_sees_its_own_context(self):
        r = Leaky()
        self.cluster.set_attempt(0)
        self.cluster.set_settings({"v": 1})
        self.assertEqual(self.cluster.reconcile(r, ObjectKey("ns", "a")), Action.requeue_after(1))
        first = Leaky.last
        self.cluster.set_attempt(4)
        self.cluster.set_settings({"v": 2})
        self.cluster.set_deadline_remaining(timedelta(milliseconds=250))
        self.cluster.set_cancelled(True)
        self.assertEqual(self.cluster.reconcile(r, ObjectKey("ns", "b")), Action.requeue_after(5))
        self.assertIsNot(Leaky.last, first)
        with self.assertRaisesRegex(RuntimeError, "reconcile that has returned"):
            first.attempt
        with self.assertRaises(RuntimeError):
            Leaky.last.settings()

    def test_the_component_contains_unexpected_exceptions(self):
        r = Leaky()
        with self.assertRaises(KeyError):  # tests see the bug itself
            self.cluster.reconcile(r, ObjectKey("ns", "boom"))
        with self.assertRaises(TransientError) as e:  # the component: a retry and a log line
            run(r, ObjectKey("ns", "boom"), contain_unexpected=True)
        self.assertEqual(e.exception.message, "unexpected KeyError: 'spec'")
        self.assertEqual(self.cluster.logs[-1].level, "error")
        self.assertRegex(self.cluster.logs[-1].message, re.compile("Traceback.*KeyError", re.S))
        with self.assertRaises(PermanentError):
            run(r, ObjectKey("ns", "wrong"), contain_unexpected=True)
        with self.assertRaises(RuntimeError):
            Leaky.last.cancelled()

    def test_export_is_inert_natively(self):
        self.assertIs(export(Leaky), Leaky)
        self.assertNotIn("WitWorld", globals())
        with self.assertRaises(TypeError):
            export(object())


class SecretsTest(unittest.TestCase):
    def test_a_fake_cluster_reveals_only_what_its_entry_allows(self):
        from wasmctrl_sdk import Forbidden, NotFound, secrets
        from wasmctrl_sdk.testing import FakeCluster

        with FakeCluster() as cluster:
            cluster.set_secret("shown", "v4lue", reveal=True)
            cluster.set_secret("hidden", "s3cret")
            self.assertEqual(secrets.reveal("shown"), "v4lue")
            with self.assertRaisesRegex(Forbidden, "reveal: true"):
                secrets.reveal("hidden")
            with self.assertRaises(NotFound):
                secrets.reveal("nope")
        self.assertEqual(secrets.placeholder("t"), "${secret:t}")


class HttpTest(unittest.TestCase):
    def test_a_fake_cluster_answers_canned_requests_once_and_records_them(self):
        from wasmctrl_sdk import http
        from wasmctrl_sdk.testing import FakeCluster

        with FakeCluster() as cluster:
            cluster.answer_http("GET", "https://api.example.com/x", 200, b'{"a": 1}')
            answer = http.get("https://api.example.com/x")
            self.assertEqual((answer.status, answer.json()["a"]), (200, 1))
            with self.assertRaisesRegex(http.HttpError, "no canned answer"):
                http.get("https://api.example.com/x")
            with self.assertRaisesRegex(http.HttpError, "must start with https://"):
                http.get("ftp://api.example.com/x")
            self.assertEqual([r.method for r in cluster.http_requests], ["GET", "GET"])


class NoHostTest(unittest.TestCase):
    def test_calls_without_a_host_say_what_is_missing(self):
        _host.install(None)
        with self.assertRaisesRegex(RuntimeError, "FakeCluster"):
            gadgets().get("g")


if __name__ == "__main__":
    unittest.main()
