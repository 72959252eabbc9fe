"""The reconciler against the SDK's fake API server (``python3 -m
unittest``): every call is held to the permissions its metadata declares."""

import unittest

from wasmctrl_sdk import Action, Api, ObjectKey, conditions, kinds  # noqa: F401
from wasmctrl_sdk.testing import FakeCluster

from {{module}} import FINALIZER, {{KIND}}, {{Reconciler}}


class {{Reconciler}}Test(unittest.TestCase):
    def test_a_new_object_becomes_ready_and_is_released_on_delete(self):
        with FakeCluster() as cluster:
            api = Api.namespaced({{KIND}}, "default")
            key = ObjectKey("default", "sample")
            api.create({"metadata": {"name": "sample"}, "spec": {{spec_sample}}})

            self.assertEqual(cluster.reconcile({{Reconciler}}(), key), Action.done())
            obj = api.get("sample")
            self.assertEqual(obj["metadata"]["finalizers"], [FINALIZER])
            generation = obj["metadata"]["generation"]
            self.assertEqual(obj["status"]["observedGeneration"], generation)
            ready = conditions.get(obj["status"]["conditions"], "Ready")
            self.assertEqual(ready["status"], "True")
            self.assertEqual(ready["observedGeneration"], generation)
{{test_owned}}
            # Nothing changed: the second reconcile leaves the status alone.
            before = len(cluster.calls())
            self.assertEqual(cluster.reconcile({{Reconciler}}(), key), Action.done())
            self.assertNotIn("patch-status", [c.verb for c in cluster.calls()[before:]])

            # Deleted: the finalizer runs, is removed, and the object goes away.
            api.delete("sample")
            self.assertEqual(cluster.reconcile({{Reconciler}}(), key), Action.done())
            self.assertIsNone(api.get_opt("sample"))
            self.assertEqual(cluster.reconcile({{Reconciler}}(), key), Action.done())

            self.assertEqual(cluster.unused_permissions({{Reconciler}}()), [])


if __name__ == "__main__":
    unittest.main()
