import unittest

from wasmctrl_sdk import Action, Api, ObjectKey, kinds
from wasmctrl_sdk.testing import FakeCluster

from hello import Hello


class HelloTest(unittest.TestCase):
    def test_annotates_the_number_of_keys(self):
        with FakeCluster() as cluster:
            configmaps = Api.namespaced(kinds.CONFIG_MAP, "default")
            configmaps.create({"metadata": {"name": "app"}, "data": {"a": "1", "b": "2"}})
            self.assertEqual(cluster.reconcile(Hello(), ObjectKey("default", "app")), Action.requeue_after(300))
            self.assertEqual(configmaps.get("app")["metadata"]["annotations"]["hello.wasmctrl.dev/keys"], "2")
            self.assertEqual(cluster.logs[0].fields, [("attempt", "0")])
            self.assertEqual(cluster.reconcile(Hello(), ObjectKey("default", "gone")), Action.done())
            self.assertEqual(cluster.unused_permissions(Hello()), [])


if __name__ == "__main__":
    unittest.main()
