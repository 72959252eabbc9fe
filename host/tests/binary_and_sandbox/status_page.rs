//! The admin port's status page as a person sees it: `wasmctrl dev` on the
//! quick start, opened in a real browser (Debian's headless Chromium),
//! whose rendered DOM shows the plugin's row and state after a reconcile
//! and after a hot swap; and the log it writes to a pipe, without colour.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use wasmctrl_testkit::admin::http;
use wasmctrl_testkit::eventually;

use crate::binary::{Dev, QUICKSTART, quickstart_config};

const LIMIT: Duration = Duration::from_secs(60);

/// `wasmctrl dev` on the quick start, its files in `dir`.
async fn quickstart(dir: &Path) -> Dev {
    let config = quickstart_config(dir);
    let args = [
        "--addr".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
        "--apply".as_ref(),
        QUICKSTART.as_ref(),
    ];
    Dev::start::<&std::ffi::OsStr>(&args, dir.join("kc")).await
}

/// Debian's Chromium (`apt-get install chromium`), or
/// `WASMCTRL_TEST_CHROMIUM`.
fn chromium() -> PathBuf {
    let path = std::env::var_os("WASMCTRL_TEST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        path.exists(),
        "the status page is tested in a real browser: install Debian's `chromium` package \
         (apt-get install chromium) or point WASMCTRL_TEST_CHROMIUM at a Chromium binary ({} not found)",
        path.display()
    );
    path
}

/// Chromium headless on `url` with `args`: its stdout.
fn browse(profile: &Path, url: &str, args: &[&str]) -> String {
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_each_plugin_in_a_browser_after_a_reconcile_and_a_hot_swap() {
    let dir = tempfile::tempdir().unwrap();
    let dev = quickstart(dir.path()).await;
    let url = format!("http://{}/", dev.admin);
    // The ready banner names what to look at.
    let banner = dev.printed.join("\n");
    assert!(
        banner.contains("wasmctrl dev is ready (plugins: webapp)")
            && banner.contains(&format!("status page: {url}"))
            && banner.contains("kubectl:     export KUBECONFIG=/"),
        "{banner}"
    );
    let profile = dir.path().join("chromium");

    // After the quick start's WebApp was reconciled: the plugin's row,
    // running at generation 1, and the key among the recent reconciles.
    let dom = eventually(
        "the page shows webapp's reconcile of default/hello",
        LIMIT,
        || {
            let dom = browse(&profile, &url, &["--dump-dom"]);
            async move {
                (dom.contains(r#"data-plugin="webapp" data-state="running" data-generation="1""#)
                    && dom.contains("<td>default/hello</td>"))
                .then_some(dom)
            }
        },
    )
    .await;
    assert!(dom.contains(r#"<table id="recent">"#), "{dom}");
    assert!(
        dom.contains("role: <b id=\"role\">single replica</b>"),
        "{dom}"
    );

    // A hot swap: the same row, at generation 2.
    let (status, body) = http(dev.admin, "POST", "/plugins/webapp/reload", &[]).await;
    assert_eq!(status, 200, "{body}");
    eventually("the page shows webapp at generation 2", LIMIT, || {
        let dom = browse(&profile, &url, &["--dump-dom"]);
        async move {
            dom.contains(r#"data-plugin="webapp" data-state="running" data-generation="2""#)
                .then_some(())
        }
    })
    .await;

    // Its log goes to a pipe here, not a terminal: no colour codes in it.
    let log = dev.log();
    assert!(log.contains("INFO"), "{log}");
    assert!(
        !log.contains('\x1b'),
        "escape codes in a piped log: {log:?}"
    );

    // And what a person sees: a rendered screenshot.
    let shot = dir.path().join("status.png");
    browse(
        &profile,
        &url,
        &[&format!("--screenshot={}", shot.display())],
    );
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 4096,
        "a screenshot of the page ({} bytes)",
        png.len()
    );
}

/// Every metric the Grafana dashboard in `deploy/grafana/` queries exists
/// in `/metrics` of a running host, so no panel is silently empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_grafana_dashboard_queries_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let dev = quickstart(dir.path()).await;
    // Once the quick start's WebApp was reconciled, the reconcile families
    // have their first series.
    let metrics = eventually("a reconcile in /metrics", LIMIT, || async {
        let (status, metrics) = http(dev.admin, "GET", "/metrics", &[]).await;
        (status == 200 && metrics.contains("controller_runtime_reconcile_total{"))
            .then_some(metrics)
    })
    .await;
    // Families as the exposition declares them: `# TYPE name kind`.
    let families: std::collections::BTreeMap<&str, &str> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();

    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/grafana/wasmctrl.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let exprs: Vec<&str> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap())
        .map(|t| t["expr"].as_str().unwrap())
        .collect();
    assert!(exprs.len() >= 18, "{} queries", exprs.len());
    let mut queried = std::collections::BTreeSet::new();
    for expr in &exprs {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if ["workqueue_", "controller_runtime_", "wasmctrl_"]
                .iter()
                .any(|p| word.starts_with(p))
            {
                queried.insert(word);
            }
        }
    }
    // What happens only on an event (a trap, a limit, throttling, a
    // canary or shadow candidate) has no series until it happens: those
    // names are checked against the families the host registers.
    let registered = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/control/metrics/registry.rs"
    ))
    .unwrap();
    let family_of = |name: &str| -> String {
        ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name)
            .to_string()
    };
    let mut live = 0;
    let missing: Vec<&str> = queried
        .iter()
        .copied()
        .filter(|name| {
            // A sample's name is its family's, plus `_total` for a counter
            // and `_bucket`, `_sum` or `_count` for a histogram.
            let served = |family: &str, kinds: &[&str]| {
                families.get(family).is_some_and(|k| kinds.contains(k))
            };
            let counter = name
                .strip_suffix("_total")
                .is_some_and(|f| served(f, &["counter"]));
            let histogram = ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|s| name.strip_suffix(s))
                .any(|f| served(f, &["histogram"]));
            if counter || histogram || served(name, &["gauge"]) {
                live += 1;
                return false;
            }
            !registered.contains(&format!("\"{}\"", family_of(name)))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics the host does not serve: {missing:?}\nserved: {families:?}"
    );
    // Reconciles, latency, queues and workers are served once a reconcile
    // ran; errors, traps and limits once one happened.
    for name in [
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_time_seconds_bucket",
        "controller_runtime_active_workers",
        "controller_runtime_max_concurrent_reconciles",
        "workqueue_depth",
    ] {
        assert!(queried.contains(name), "the dashboard charts {name}");
        assert!(
            metrics.lines().any(|l| l.starts_with(name)),
            "{name} is served from the start"
        );
    }
    assert!(live >= 5, "{live} of {} names served live", queried.len());
    assert!(queried.len() >= 20, "{queried:?}");
}
