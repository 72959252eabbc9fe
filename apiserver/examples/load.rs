//! Rough throughput check: `cargo run --release -p wasmctrl-apiserver
//! --example load -- [WRITERS] [WRITES_PER_WRITER] [WATCHERS]`. Prints
//! writes/s from concurrent kube-rs clients and watch events/s delivered;
//! `LOAD_DATA_DIR=DIR` persists to a redb database there.

use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

async fn client(server: &wasmctrl_apiserver::ApiServer) -> kube::Client {
    let kc = Kubeconfig::from_yaml(&server.kubeconfig()).expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    kube::Client::try_from(cfg).expect("client")
}

#[tokio::main]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let writers = args.first().copied().unwrap_or(16);
    let per = args.get(1).copied().unwrap_or(1000);
    let watchers = args.get(2).copied().unwrap_or(0);
    // LOAD_DATA_DIR measures with persistence on.
    let config = wasmctrl_apiserver::Config {
        data_dir: std::env::var_os("LOAD_DATA_DIR").map(Into::into),
        ..Default::default()
    };
    let server = wasmctrl_apiserver::ApiServer::start(config)
        .await
        .expect("start");
    let total = writers * per;
    let mut watch_tasks = Vec::new();
    for _ in 0..watchers {
        let api: Api<ConfigMap> = Api::namespaced(client(&server).await, "default");
        let rv = server.resource_version().to_string();
        watch_tasks.push(tokio::spawn(async move {
            let mut n = 0;
            let stream = api
                .watch(&WatchParams::default(), &rv)
                .await
                .expect("watch");
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                if let Ok(WatchEvent::Added(_)) = ev {
                    n += 1;
                    if n == total {
                        break;
                    }
                }
            }
            n
        }));
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let api: Api<ConfigMap> = Api::namespaced(client(&server).await, "default");
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(format!("w{w}-{i}")),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                api.create(&PostParams::default(), &cm)
                    .await
                    .expect("create");
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "writes/s: {:.0} ({total} in {secs:.2}s)",
        total as f64 / secs
    );
    if watchers > 0 {
        let mut delivered = 0;
        for t in watch_tasks {
            delivered += t.await.expect("watcher");
        }
        let secs = start.elapsed().as_secs_f64();
        println!("watch events/s: {:.0}", delivered as f64 / secs);
    }
    let api: Api<ConfigMap> = Api::namespaced(client(&server).await, "default");
    let t = Instant::now();
    let list = api.list(&Default::default()).await.expect("list");
    println!(
        "list of {} ms: {}",
        list.items.len(),
        t.elapsed().as_millis()
    );
    server.shutdown().await;
}
