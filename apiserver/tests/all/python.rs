//! The official Python client (PyPI `kubernetes`): CRUD, watch, a 409 and
//! pages.

use std::path::PathBuf;
use std::process::Command;

use crate::common::Harness;

/// A virtualenv with `kubernetes` installed: `$WASMCTRL_PY_VENV` if set,
/// else one created (once) under the cargo target directory.
fn venv() -> PathBuf {
    if let Ok(v) = std::env::var("WASMCTRL_PY_VENV") {
        return PathBuf::from(v);
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("py-kubernetes-venv");
    let python = dir.join("bin/python");
    let ready = dir.join(".ready");
    if !ready.exists() {
        let status = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&dir)
            .status()
            .expect("python3");
        assert!(status.success(), "creating the venv");
        let status = Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "kubernetes",
            ])
            .status()
            .expect("pip");
        assert!(status.success(), "pip install kubernetes");
        std::fs::write(&ready, b"").unwrap();
    }
    dir
}

const SCRIPT: &str = r#"
import sys, threading
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()

cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py1", labels={"app": "py"}), data={"a": "1"})
created = v1.create_namespaced_config_map("default", cm)
assert created.metadata.uid
got = v1.read_namespaced_config_map("py1", "default")
assert got.data == {"a": "1"}, got.data

# A dict patch is a strategic merge patch.
patched = v1.patch_namespaced_config_map("py1", "default", {"data": {"b": "2"}})
assert patched.data == {"a": "1", "b": "2"}, patched.data

# A stale resourceVersion is a 409.
stale = got
stale.data = {"c": "3"}
try:
    v1.replace_namespaced_config_map("py1", "default", stale)
    raise SystemExit("expected 409")
except ApiException as e:
    assert e.status == 409, e.status

try:
    v1.create_namespaced_config_map("default", cm)
    raise SystemExit("expected 409 AlreadyExists")
except ApiException as e:
    assert e.status == 409, e.status

try:
    v1.read_namespaced_config_map("missing", "default")
    raise SystemExit("expected 404")
except ApiException as e:
    assert e.status == 404, e.status

listed = v1.list_namespaced_config_map("default", label_selector="app=py")
assert [i.metadata.name for i in listed.items] == ["py1"]

seen = []
w = watch.Watch()
def change():
    v1.patch_namespaced_config_map("py1", "default", {"data": {"d": "4"}})
for ev in w.stream(v1.list_namespaced_config_map, "default", label_selector="app=py", timeout_seconds=10):
    seen.append((ev["type"], ev["object"].metadata.name))
    if len(seen) == 1:
        threading.Thread(target=change).start()
    if len(seen) == 2:
        w.stop()
assert seen == [("ADDED", "py1"), ("MODIFIED", "py1")], seen

v1.delete_namespaced_config_map("py1", "default")
assert v1.list_namespaced_config_map("default", label_selector="app=py").items == []

# Pages: a continue token, and what remains counted without a selector.
for n in range(3):
    v1.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"page{n}")))
first = v1.list_namespaced_config_map("default", limit=1)
assert first.metadata._continue, first.metadata
assert first.metadata.remaining_item_count == 2, first.metadata
second = v1.list_namespaced_config_map("default", limit=1, _continue=first.metadata._continue)
assert second.metadata.remaining_item_count == 1, second.metadata
assert [i.metadata.name for i in second.items] == ["page1"], second.items
print("python ok")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_crud_watch_conflict() {
    let h = Harness::start().await;
    let venv = tokio::task::spawn_blocking(venv).await.unwrap();
    let script = h.dir.path().join("client.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let kc = h.kubeconfig_path();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(venv.join("bin/python"))
            .arg(&script)
            .arg(&kc)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "python client failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("python ok"));
}
