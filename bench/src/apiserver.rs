//! `apiserver`: throughput of the embedded API server as kube-rs sees it,
//! in three phases on one server (in-process, TLS on loopback, no
//! persistence), each measured by itself:
//!
//! 1. **writes/s**: 16 kube-rs clients (16 connections), each creating its
//!    share of ConfigMaps and then updating (PUT) each one once, one request
//!    in flight per client, no watchers. Writes / wall time of the phase.
//! 2. **watch events/s**: delivery to 100 watchers, measured apart from the
//!    writes that produce the events: `watch_events` updates are written
//!    first (16 clients), then 100 kube-rs watches open at the
//!    resourceVersion before them (inside the server's history window) and
//!    each receives and decodes every one of those events. Events delivered
//!    (watchers × events) / time from opening the watches to the last
//!    watcher's last event. The table also shows the live variant (watchers
//!    connected while the same number of updates is written), which is
//!    bounded by the write rate.
//! 3. **list at 100k**: the store is topped up to `objects` ConfigMaps
//!    (16 clients × 8 creates in flight), then a full, unpaginated list via
//!    kube-rs `Api::list` (request, server-side rendering, transfer and
//!    decoding into `ConfigMap`s); the median of three lists.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, PostParams, WatchEvent, WatchParams};
use serde::Serialize;
use wasmctrl_apiserver::ApiServer;

use crate::stats::{load_average, round};

/// The goal for writes/s on the 2-core reference machine.
const GOAL_WRITES_PER_S: f64 = 5_000.0;
const NAMESPACE: &str = "default";
/// Creates in flight per client while filling the store for the list.
const FILL_IN_FLIGHT: usize = 8;
/// Lists timed at the end (the median is reported).
const LISTS: usize = 3;

#[derive(Debug, Clone)]
pub struct Options {
    /// Concurrent kube-rs clients writing.
    pub writers: usize,
    /// Writes per client in the write phase (half creates, half updates).
    pub writes_per_writer: usize,
    /// Concurrent watchers.
    pub watchers: usize,
    /// Events each watcher receives in the watch phase.
    pub watch_events: usize,
    /// Objects in the store when the list is timed.
    pub objects: usize,
    pub json: bool,
}

#[derive(Serialize)]
struct JsonLine {
    scenario: &'static str,
    writes_per_s: u64,
    watch_events_per_s: u64,
    list_100k_ms: f64,
}

/// A kube-rs client for `server`, from the kubeconfig it generates.
pub async fn client_for(server: &ApiServer) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::from_yaml(&server.kubeconfig())?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(kube::Client::try_from(config)?)
}

fn configmap(name: String, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            ..ObjectMeta::default()
        },
        data: Some([("v".to_string(), value.to_string())].into()),
        ..ConfigMap::default()
    }
}

async fn clients(server: &ApiServer, n: usize) -> anyhow::Result<Vec<Api<ConfigMap>>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(Api::namespaced(client_for(server).await?, NAMESPACE));
    }
    Ok(out)
}

/// Phase 1: each client creates `per / 2` ConfigMaps, then updates each
/// once. Returns (writes, seconds).
async fn write_phase(apis: &[Api<ConfigMap>], per: usize) -> anyhow::Result<(usize, f64)> {
    let creates = per / 2;
    let start = Instant::now();
    let tasks: Vec<_> = apis
        .iter()
        .enumerate()
        .map(|(w, api)| {
            let api = api.clone();
            tokio::spawn(async move {
                let mut created = Vec::with_capacity(creates);
                for i in 0..creates {
                    let cm = api
                        .create(&PostParams::default(), &configmap(format!("w{w}-{i}"), "0"))
                        .await
                        .context("create")?;
                    created.push(cm);
                }
                for mut cm in created {
                    let name = cm.metadata.name.clone().unwrap_or_default();
                    cm.data = Some([("v".to_string(), "1".to_string())].into());
                    api.replace(&name, &PostParams::default(), &cm)
                        .await
                        .context("update")?;
                }
                anyhow::Ok(creates * 2)
            })
        })
        .collect();
    let mut writes = 0;
    for t in tasks {
        writes += t.await??;
    }
    Ok((writes, start.elapsed().as_secs_f64()))
}

/// `n` updates of the phase-1 objects, spread over the clients (merge
/// patches, so no resourceVersion is needed). Returns when all are done.
async fn update_burst(
    apis: &[Api<ConfigMap>],
    per: usize,
    n: usize,
    round: usize,
) -> anyhow::Result<()> {
    let clients = apis.len();
    let tasks: Vec<_> = apis
        .iter()
        .enumerate()
        .map(|(w, api)| {
            let api = api.clone();
            // Client w writes updates w, w + clients, ... of the n.
            let mine = (w..n).step_by(clients).count();
            tokio::spawn(async move {
                for j in 0..mine {
                    let name = format!("w{w}-{}", j % (per / 2));
                    let patch = serde_json::json!({"data": {"v": format!("{round}-{j}")}});
                    api.patch(
                        &name,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(&patch),
                    )
                    .await
                    .context("update")?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Opens `watchers` watches at `rv`; each counts events until it has seen
/// `expect`. Returns when every watch is open, with the tasks to await.
async fn open_watches(
    server: &ApiServer,
    watchers: usize,
    rv: u64,
    expect: usize,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<anyhow::Result<(usize, Instant)>>>> {
    // Watches share a few clients (each keeps a connection per open watch).
    let shared = clients(server, 4).await?;
    let mut tasks = Vec::with_capacity(watchers);
    let opened = Arc::new(AtomicUsize::new(0));
    let all_open = Arc::new(tokio::sync::Notify::new());
    for i in 0..watchers {
        let api = shared[i % shared.len()].clone();
        let rv = rv.to_string();
        let (opened, all_open) = (opened.clone(), all_open.clone());
        tasks.push(tokio::spawn(async move {
            let params = WatchParams::default().timeout(290);
            let stream = api.watch(&params, &rv).await.context("watch")?;
            if opened.fetch_add(1, Ordering::SeqCst) + 1 == watchers {
                all_open.notify_one();
            }
            let mut stream = std::pin::pin!(stream);
            let mut n = 0;
            while n < expect {
                match stream.try_next().await.context("watch stream")? {
                    Some(WatchEvent::Added(_) | WatchEvent::Modified(_)) => n += 1,
                    Some(WatchEvent::Error(e)) => anyhow::bail!("watch error: {e:?}"),
                    Some(_) => {}
                    None => anyhow::bail!("watch ended after {n} of {expect} events"),
                }
            }
            Ok((n, Instant::now()))
        }));
    }
    if opened.load(Ordering::SeqCst) < watchers {
        tokio::time::timeout(Duration::from_secs(30), all_open.notified())
            .await
            .context("opening the watches")?;
    }
    Ok(tasks)
}

async fn delivered(
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<(usize, Instant)>>>,
) -> anyhow::Result<(usize, Instant)> {
    let mut total = 0;
    let mut last: Option<Instant> = None;
    for t in tasks {
        let (n, at) = t.await??;
        total += n;
        last = Some(last.map_or(at, |l| l.max(at)));
    }
    Ok((total, last.unwrap_or_else(Instant::now)))
}

struct Results {
    writes: usize,
    write_secs: f64,
    replay_events: usize,
    replay_secs: f64,
    live_events: usize,
    live_secs: f64,
    live_write_secs: f64,
    fill_writes: usize,
    fill_secs: f64,
    listed: usize,
    list_ms: Vec<f64>,
}

async fn measure(options: &Options) -> anyhow::Result<Results> {
    let server = ApiServer::start(wasmctrl_apiserver::Config::default())
        .await
        .context("starting the API server")?;
    let apis = clients(&server, options.writers).await?;
    // Connections and TLS sessions are set up before the clock starts.
    for api in &apis {
        api.list(&ListParams::default().limit(1)).await?;
    }

    // 1. Writes.
    let (writes, write_secs) = write_phase(&apis, options.writes_per_writer).await?;

    // 2. Watch delivery, apart from the writes: events first, then watches
    // replaying them from the history window.
    let n = options.watch_events;
    let rv = server.resource_version();
    update_burst(&apis, options.writes_per_writer, n, 1).await?;
    let start = Instant::now();
    let tasks = open_watches(&server, options.watchers, rv, n).await?;
    let (replay_events, last) = delivered(tasks).await?;
    let replay_secs = (last - start).as_secs_f64();

    // 2b. Live: watchers connected while the updates are written.
    let rv = server.resource_version();
    let tasks = open_watches(&server, options.watchers, rv, n).await?;
    let start = Instant::now();
    update_burst(&apis, options.writes_per_writer, n, 2).await?;
    let live_write_secs = start.elapsed().as_secs_f64();
    let (live_events, last) = delivered(tasks).await?;
    let live_secs = (last - start).as_secs_f64();

    // 3. Fill to `objects`, then list.
    let have = options.writers * (options.writes_per_writer / 2);
    let missing = options.objects.saturating_sub(have);
    let start = Instant::now();
    let tasks: Vec<_> = apis
        .iter()
        .enumerate()
        .map(|(w, api)| {
            let api = api.clone();
            let mine: Vec<usize> = (w..missing).step_by(apis.len()).collect();
            tokio::spawn(async move {
                futures::stream::iter(mine)
                    .map(|i| {
                        let api = api.clone();
                        async move {
                            api.create(&PostParams::default(), &configmap(format!("fill-{i}"), "x"))
                                .await
                                .context("create")
                        }
                    })
                    .buffer_unordered(FILL_IN_FLIGHT)
                    .try_for_each(|_| async { Ok(()) })
                    .await
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    let fill_secs = start.elapsed().as_secs_f64();
    let lister = Api::<ConfigMap>::namespaced(client_for(&server).await?, NAMESPACE);
    lister.list(&ListParams::default().limit(1)).await?;
    let mut list_ms = Vec::with_capacity(LISTS);
    let mut listed = 0;
    for _ in 0..LISTS {
        let t = Instant::now();
        let list = lister.list(&ListParams::default()).await.context("list")?;
        list_ms.push(t.elapsed().as_secs_f64() * 1e3);
        listed = list.items.len();
    }
    ensure!(
        listed >= options.objects,
        "listed {listed} objects, expected {}",
        options.objects
    );
    server.shutdown().await;
    Ok(Results {
        writes,
        write_secs,
        replay_events,
        replay_secs,
        live_events,
        live_secs,
        live_write_secs,
        fill_writes: missing,
        fill_secs,
        listed,
        list_ms,
    })
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    ensure!(options.writers > 0, "--writers must be at least 1");
    ensure!(
        options.writes_per_writer >= 2,
        "--writes-per-writer must be at least 2"
    );
    ensure!(
        options.watch_events > 0,
        "--watch-events must be at least 1"
    );
    ensure!(
        options.watch_events <= wasmctrl_apiserver::WATCH_HISTORY_LEN,
        "--watch-events must fit in the server's history window ({})",
        wasmctrl_apiserver::WATCH_HISTORY_LEN
    );
    let load_before = load_average();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let r = tokio.block_on(measure(options))?;
    let writes_per_s = r.writes as f64 / r.write_secs;
    let watch_events_per_s = r.replay_events as f64 / r.replay_secs;
    let mut sorted = r.list_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let list_ms = sorted[sorted.len() / 2];
    if options.json {
        let line = JsonLine {
            scenario: "apiserver",
            writes_per_s: writes_per_s.round() as u64,
            watch_events_per_s: watch_events_per_s.round() as u64,
            list_100k_ms: round(list_ms, 1),
        };
        println!("{}", serde_json::to_string(&line)?);
        return Ok(());
    }
    println!(
        "apiserver: embedded API server, kube-rs clients, {} CPUs, load {load_before} before / {} after",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    println!(
        "  writes:      {writes_per_s:>9.0} writes/s   ({} creates+updates by {} clients in {:.2} s; goal >= {GOAL_WRITES_PER_S:.0}: {})",
        r.writes,
        options.writers,
        r.write_secs,
        if writes_per_s >= GOAL_WRITES_PER_S {
            "met"
        } else {
            "MISSED"
        }
    );
    println!(
        "  watch:       {watch_events_per_s:>9.0} events/s   ({} watchers x {} events replayed from the history window in {:.2} s)",
        options.watchers, options.watch_events, r.replay_secs
    );
    println!(
        "  watch live:  {:>9.0} events/s   ({} delivered in {:.2} s while {} updates were written in {:.2} s = {:.0} writes/s)",
        r.live_events as f64 / r.live_secs,
        r.live_events,
        r.live_secs,
        options.watch_events,
        r.live_write_secs,
        options.watch_events as f64 / r.live_write_secs
    );
    println!(
        "  fill:        {:>9.0} creates/s  ({} creates, {} clients x {FILL_IN_FLIGHT} in flight, {:.2} s)",
        r.fill_writes as f64 / r.fill_secs,
        r.fill_writes,
        options.writers,
        r.fill_secs
    );
    println!(
        "  list:        {list_ms:>9.1} ms         (full list of {} ConfigMaps via kube-rs, median of {LISTS}: {})",
        r.listed,
        r.list_ms
            .iter()
            .map(|m| format!("{m:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}
