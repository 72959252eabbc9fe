//! The status page at `/`: one server-rendered HTML document, no scripts
//! or styles from anywhere else, that shows what the host is doing. A
//! short inline script fetches `/status/fragment` every two seconds and
//! swaps it in, so the page stays live without a build step; without
//! scripts it is still correct, only not live.
//!
//! Every string on it comes from a plugin, an object or a config, so every
//! one goes through [`escape`].

use std::fmt::Write;

use serde::Serialize;

use crate::control::controller::activity::{BUCKET_SECONDS, BUCKETS};
use crate::control::controller::{ActivitySummary, Outcome};

/// Everything the page shows, as the host reports it.
#[derive(Debug, Clone, Serialize)]
pub struct PageData {
    /// The host's role: `leader`, `standby`, `shards …` or `single`.
    pub role: String,
    /// Ok once ready; else why not.
    pub ready: Result<(), String>,
    pub plugins: Vec<PluginPage>,
}

/// One plugin's row and panel.
#[derive(Debug, Clone, Serialize)]
pub struct PluginPage {
    pub name: String,
    pub version: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// `loading`, `starting`, `running`, `standby`, `failed`, …
    pub state: String,
    /// 1 at start, +1 per swap.
    pub generation: u64,
    /// The candidate beside it: mode and state (`shadow`, `canary: …`).
    pub candidate: Option<String>,
    /// Queued keys per priority, highest first.
    pub queue: Vec<(i32, usize)>,
    /// Why the last load, reload or sync failed, until the next success.
    pub last_error: Option<String>,
    pub activity: ActivitySummary,
}

/// The whole document.
pub fn document(data: &PageData, token: Option<&str>) -> String {
    // The token the page was opened with goes along with each refresh; it
    // is written into the page only for the one who presented it, and
    // `url_escape` leaves nothing a script or HTML parser treats specially.
    let query = token
        .map(|t| format!("?token={}", url_escape(t)))
        .unwrap_or_default();
    format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>wasmctrl</title>
<style>{STYLE}</style>
</head>
<body>
<header><h1>wasmctrl</h1><span id="updated">live</span></header>
<main id="status">{fragment}</main>
<script>
(function () {{
  var main = document.getElementById("status");
  var updated = document.getElementById("updated");
  function refresh() {{
    fetch("/status/fragment{query}", {{ cache: "no-store" }})
      .then(function (r) {{ if (!r.ok) throw new Error(r.status); return r.text(); }})
      .then(function (html) {{ main.innerHTML = html; updated.textContent = "live"; }})
      .catch(function () {{ updated.textContent = "not reachable"; }});
  }}
  setInterval(refresh, 2000);
}})();
</script>
</body>
</html>
"#,
        fragment = fragment(data),
    )
}

/// The part of the page that refreshes: host, plugins, errors, reconciles.
pub fn fragment(data: &PageData) -> String {
    let mut out = String::new();
    let ready = match &data.ready {
        Ok(()) => r#"<span class="ok">ready</span>"#.to_string(),
        Err(why) => format!(r#"<span class="bad">not ready</span>: {}"#, escape(why)),
    };
    let _ = write!(
        out,
        r#"<section class="host"><p>role: <b id="role">{}</b> · {ready}</p></section>"#,
        escape(&data.role)
    );
    out.push_str(
        r#"<section><h2>Plugins</h2><table id="plugins"><thead><tr><th>plugin</th><th>version</th><th>digest</th><th>state</th><th>candidate</th><th>queue</th><th>reconciles/s</th><th>errors (1 min)</th><th>p99</th><th>last 5 min</th></tr></thead><tbody>"#,
    );
    for p in &data.plugins {
        plugin_row(&mut out, p);
    }
    out.push_str("</tbody></table></section>");
    if data.plugins.is_empty() {
        out.push_str(r#"<p class="empty">No plugins loaded.</p>"#);
    }
    let mut errors: Vec<(&str, &Outcome)> = data
        .plugins
        .iter()
        .flat_map(|p| p.activity.errors.iter().map(move |o| (p.name.as_str(), o)))
        .collect();
    errors.sort_by(|a, b| b.1.at.total_cmp(&a.1.at));
    out.push_str(r#"<section><h2>Last errors</h2>"#);
    outcomes(&mut out, "errors", &errors, true);
    out.push_str("</section>");
    let mut recent: Vec<(&str, &Outcome)> = data
        .plugins
        .iter()
        .flat_map(|p| p.activity.recent.iter().map(move |o| (p.name.as_str(), o)))
        .collect();
    recent.sort_by(|a, b| b.1.at.total_cmp(&a.1.at));
    recent.truncate(30);
    out.push_str(r#"<section><h2>Recent reconciles</h2>"#);
    outcomes(&mut out, "recent", &recent, false);
    out.push_str("</section>");
    out
}

fn plugin_row(out: &mut String, p: &PluginPage) {
    let queue = if p.queue.is_empty() {
        "0".to_string()
    } else {
        p.queue
            .iter()
            .map(|(priority, n)| format!("{n} at {priority}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let short = p.digest.strip_prefix("sha256:").unwrap_or(&p.digest);
    let short = &short[..short.len().min(12)];
    let state_class = match p.state.as_str() {
        "running" => "ok",
        "failed" => "bad",
        _ => "",
    };
    let a = &p.activity;
    let _ = write!(
        out,
        r#"<tr class="plugin" data-plugin="{name}" data-state="{state}" data-generation="{generation}"><td class="name">{name}</td><td>{version}</td><td title="{digest}"><code>{short}</code></td><td class="state {state_class}">{state}{error}</td><td>{candidate}</td><td>{queue}</td><td>{rate:.2}</td><td>{errors}</td><td>{p99}</td><td>{spark}</td></tr>"#,
        name = escape(&p.name),
        version = escape(&p.version),
        digest = escape(&p.digest),
        short = escape(short),
        state = escape(&p.state),
        generation = p.generation,
        error = p
            .last_error
            .as_ref()
            .map(|e| format!(r#"<div class="why">{}</div>"#, escape(e)))
            .unwrap_or_default(),
        candidate = escape(p.candidate.as_deref().unwrap_or("—")),
        queue = escape(&queue),
        rate = a.rate,
        errors = a.errors_last_minute,
        p99 = a
            .p99_millis
            .map(|ms| format!("≤ {ms} ms"))
            .unwrap_or_else(|| "—".into()),
        spark = sparkline(&a.series, &a.error_series),
    );
}

fn outcomes(out: &mut String, id: &str, list: &[(&str, &Outcome)], with_error: bool) {
    if list.is_empty() {
        let _ = write!(out, r#"<p id="{id}" class="empty">None yet.</p>"#);
        return;
    }
    let _ = write!(
        out,
        r#"<table id="{id}"><thead><tr><th>when (UTC)</th><th>plugin</th><th>key</th><th>version</th><th>result</th><th>took</th></tr></thead><tbody>"#
    );
    for (plugin, o) in list {
        let result = match (&o.error, with_error) {
            (Some(e), true) => format!("{} — {}", o.result, e),
            _ => o.result.to_string(),
        };
        let _ = write!(
            out,
            r#"<tr><td>{when}</td><td>{plugin}</td><td>{key}</td><td>{version}</td><td class="{class}">{result}</td><td>{took:.1} ms</td></tr>"#,
            when = clock(o.at),
            plugin = escape(plugin),
            key = escape(&o.key),
            version = o.version,
            class = if o.error.is_some() { "bad" } else { "ok" },
            result = escape(&result),
            took = o.millis,
        );
    }
    out.push_str("</tbody></table>");
}

/// `HH:MM:SS` of `at` (seconds since the epoch), UTC.
fn clock(at: f64) -> String {
    let s = at as u64 % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// An inline SVG of reconciles (and errors, in red) per bucket.
fn sparkline(series: &[u32], errors: &[u32]) -> String {
    let (w, h) = (BUCKETS as u32 * 4, 20u32);
    let max = series.iter().copied().max().unwrap_or(0).max(1);
    let points = |values: &[u32]| {
        values
            .iter()
            .enumerate()
            .map(|(i, &v)| format!("{},{}", i * 4 + 2, h - 1 - v * (h - 2) / max))
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!(
        r##"<svg class="spark" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="reconciles per {BUCKET_SECONDS} s"><polyline fill="none" stroke="#2b6cb0" points="{}"/><polyline fill="none" stroke="#c53030" points="{}"/></svg>"##,
        points(series),
        points(errors)
    )
}

/// `text` safe in HTML text and in a double-quoted attribute.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` as a URL query value.
fn url_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1a202c}\
header{display:flex;gap:1em;align-items:baseline;padding:.5em 1em;background:#edf2f7}\
h1{font-size:1.2em;margin:0}h2{font-size:1em;margin:1em 0 .3em}\
main{padding:0 1em 1em}table{border-collapse:collapse;width:100%}\
th,td{text-align:left;padding:.2em .5em;border-bottom:1px solid #e2e8f0;vertical-align:top}\
th{font-weight:600;color:#4a5568}.ok{color:#276749}.bad{color:#c53030}\
.why{font-size:.85em;color:#c53030}.empty{color:#718096}#updated{color:#718096;font-size:.85em}";

#[cfg(test)]
mod tests {
    use super::*;

    fn activity() -> ActivitySummary {
        ActivitySummary {
            rate: 0.5,
            errors_last_minute: 1,
            p99_millis: Some(1.024),
            series: vec![0; BUCKETS],
            error_series: vec![0; BUCKETS],
            recent: vec![],
            errors: vec![Outcome {
                at: 3_600.0,
                key: "default/<img src=x onerror=alert(1)>".into(),
                version: "stable",
                result: "error",
                error: Some("transient error: \"quoted\" & <b>bold</b>".into()),
                millis: 2.0,
            }],
        }
    }

    #[test]
    fn every_string_from_a_plugin_or_object_is_escaped() {
        let data = PageData {
            role: "leader".into(),
            ready: Err("<script>x</script>".into()),
            plugins: vec![PluginPage {
                name: "web\"app".into(),
                version: "<1>".into(),
                digest: "sha256:abc".into(),
                state: "running".into(),
                generation: 2,
                candidate: Some("canary: <canary>".into()),
                queue: vec![(0, 3), (-100, 7)],
                last_error: Some("<i>why</i>".into()),
                activity: activity(),
            }],
        };
        let page = document(&data, Some("t<\"k"));
        for raw in [
            "<script>x",
            "<img",
            "<b>bold",
            "<i>why",
            "web\"app",
            "<1>",
            "<canary>",
        ] {
            assert!(!page.contains(raw), "{raw} unescaped");
        }
        assert!(page.contains("data-plugin=\"web&quot;app\""));
        assert!(page.contains("3 at 0, 7 at -100"));
        assert!(page.contains("/status/fragment?token=t%3C%22k"));
        assert!(page.contains("01:00:00"));
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "nothing from elsewhere"
        );
    }
}
