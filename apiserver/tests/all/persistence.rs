//! A write the data directory refuses fails its request and never becomes
//! visible: memory always equals disk (needs the `testing` feature to make
//! persistence fail).

use serde_json::{Value, json};

use crate::common::Harness;

const CMS: &str = "/api/v1/namespaces/default/configmaps";

/// Every ConfigMap as (name, data, resourceVersion).
async fn configmaps(h: &Harness) -> Vec<(String, Value, String)> {
    let (code, list) = h.raw("GET", CMS, None, "").await;
    assert_eq!(code, 200);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                o["data"].clone(),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

fn cm(name: &str, v: &str) -> String {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": v}})
        .to_string()
}

#[tokio::test]
async fn a_failed_persistence_fails_the_write_and_memory_stays_equal_to_disk() {
    let data = tempfile::tempdir().unwrap();
    let config = wasmctrl_apiserver::Config {
        data_dir: Some(data.path().to_path_buf()),
        ..Default::default()
    };
    let h = Harness::start_with(config.clone()).await;
    assert_eq!(h.raw("POST", CMS, None, &cm("kept", "v1")).await.0, 201);
    let before = configmaps(&h).await;
    let rv_before = h.server.resource_version();

    h.server.faults().fail_persistence(true);
    let (code, status) = h.raw("POST", CMS, None, &cm("lost", "x")).await;
    assert_eq!(code, 500, "{status}");
    assert_eq!(status["reason"], "InternalError");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("persisting the write failed"),
        "{status}"
    );
    let (code, _) = h
        .raw(
            "PATCH",
            &format!("{CMS}/kept"),
            Some("application/merge-patch+json"),
            r#"{"data":{"k":"v2"}}"#,
        )
        .await;
    assert_eq!(code, 500);
    let (code, _) = h.raw("DELETE", &format!("{CMS}/kept"), None, "").await;
    assert_eq!(code, 500);
    // Nothing of it is visible, not even the resourceVersion.
    assert_eq!(h.raw("GET", &format!("{CMS}/lost"), None, "").await.0, 404);
    assert_eq!(configmaps(&h).await, before);
    assert_eq!(h.server.resource_version(), rv_before);

    // Writes work again once the disk does.
    h.server.faults().fail_persistence(false);
    assert_eq!(h.raw("POST", CMS, None, &cm("after", "v")).await.0, 201);
    let (code, _) = h
        .raw(
            "PATCH",
            &format!("{CMS}/kept"),
            Some("application/merge-patch+json"),
            r#"{"data":{"k":"v3"}}"#,
        )
        .await;
    assert_eq!(code, 200);
    let in_memory = configmaps(&h).await;
    assert_eq!(in_memory.len(), 2);

    h.server.shutdown().await;
    let h = Harness::start_with(config).await;
    assert_eq!(configmaps(&h).await, in_memory, "disk equals memory");
}

/// A database altered outside the server (here, an object's bytes changed
/// in place) is refused at start, naming the file, instead of trusted.
#[tokio::test]
async fn a_database_altered_outside_the_server_is_refused_at_start() {
    let data = tempfile::tempdir().unwrap();
    let config = wasmctrl_apiserver::Config {
        data_dir: Some(data.path().to_path_buf()),
        ..Default::default()
    };
    let h = Harness::start_with(config.clone()).await;
    assert_eq!(
        h.raw("POST", CMS, None, &cm("kept", &"q".repeat(4096)))
            .await
            .0,
        201
    );
    h.server.shutdown().await;
    let path = data.path().join("state.redb");
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes
        .windows(64)
        .position(|w| w.iter().all(|b| *b == b'q'))
        .expect("the object's bytes are in the file");
    bytes[at..at + 64].fill(b'r');
    std::fs::write(&path, bytes).unwrap();
    let Err(e) = wasmctrl_apiserver::ApiServer::start(config).await else {
        panic!("a database altered outside the server was trusted");
    };
    let e = e.to_string();
    assert!(e.contains("state.redb"), "{e}");
}
