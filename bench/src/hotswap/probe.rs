//! The host's reconcile spans, observed through a tracing layer: reconciles
//! per version, keys reconciled by two versions at once, and the first
//! reconcile by the version a swap waits for.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context as _;
use tracing::span;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, filter};

#[derive(Default)]
pub(super) struct ProbeState {
    live: HashMap<span::Id, Live>,
    /// Live spans per key.
    by_key: HashMap<String, Vec<span::Id>>,
    pub(super) reconciles: u64,
    pub(super) failed: u64,
    pub(super) by_digest: BTreeMap<String, u64>,
    /// Keys with two reconcile spans live at once (any digests).
    pub(super) concurrent: HashSet<String>,
    /// Keys with two reconcile spans of different digests live at once.
    pub(super) overlapping: HashSet<String>,
    /// The digest a swap is waiting for, and when its first reconcile
    /// started and returned.
    armed: Option<String>,
    first_start: Option<Instant>,
    first_done: Option<Instant>,
}

struct Live {
    key: String,
    digest: Option<String>,
    /// The disposition event was seen: the key is about to be released.
    ended: bool,
}

#[derive(Clone, Default)]
pub(super) struct Probe(pub(super) Arc<Mutex<ProbeState>>);

impl Probe {
    pub(super) fn arm(&self, digest: &str) {
        let mut st = self.0.lock().unwrap();
        st.armed = Some(digest.to_string());
        st.first_start = None;
        st.first_done = None;
    }

    pub(super) fn first(&self) -> (Option<Instant>, Option<Instant>) {
        let st = self.0.lock().unwrap();
        (st.first_start, st.first_done)
    }
}

#[derive(Default)]
struct Fields {
    key: Option<String>,
    digest: Option<String>,
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "key" => self.key = Some(value.to_string()),
            "digest" => self.digest = Some(value.to_string()),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "key" => self.key = Some(format!("{value:?}")),
            "digest" => self.digest = Some(format!("{value:?}")),
            _ => {}
        }
    }
}

impl<S> Layer<S> for Probe
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, _ctx: Context<'_, S>) {
        let mut f = Fields::default();
        attrs.record(&mut f);
        let Some(key) = f.key else { return };
        let mut guard = self.0.lock().unwrap();
        let st = &mut *guard;
        let others = st.by_key.entry(key.clone()).or_default();
        if others
            .iter()
            .any(|o| st.live.get(o).is_some_and(|l| !l.ended))
        {
            st.concurrent.insert(key.clone());
        }
        others.push(id.clone());
        st.live.insert(
            id.clone(),
            Live {
                key,
                digest: None,
                ended: false,
            },
        );
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, _ctx: Context<'_, S>) {
        let mut f = Fields::default();
        values.record(&mut f);
        let Some(digest) = f.digest else { return };
        let mut guard = self.0.lock().unwrap();
        let st = &mut *guard;
        let Some(live) = st.live.get_mut(id) else {
            return;
        };
        live.digest = Some(digest.clone());
        let key = live.key.clone();
        if st.armed.as_deref() == Some(digest.as_str()) && st.first_start.is_none() {
            st.first_start = Some(Instant::now());
        }
        let other_version = st.by_key.get(&key).is_some_and(|ids| {
            ids.iter().filter(|o| *o != id).any(|o| {
                st.live
                    .get(o)
                    .is_some_and(|l| !l.ended && l.digest.as_ref().is_some_and(|d| *d != digest))
            })
        });
        if other_version {
            st.overlapping.insert(key);
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        let mut guard = self.0.lock().unwrap();
        let st = &mut *guard;
        let Some(live) = st.live.get_mut(&span.id()) else {
            return;
        };
        if live.ended {
            return;
        }
        live.ended = true;
        let digest = live.digest.clone().unwrap_or_default();
        st.reconciles += 1;
        if *event.metadata().level() <= tracing::Level::WARN {
            st.failed += 1;
        }
        if st.armed.as_deref() == Some(digest.as_str()) && st.first_done.is_none() {
            st.first_done = Some(Instant::now());
        }
        *st.by_digest.entry(digest).or_default() += 1;
    }

    fn on_close(&self, id: span::Id, _ctx: Context<'_, S>) {
        let mut guard = self.0.lock().unwrap();
        let st = &mut *guard;
        if let Some(live) = st.live.remove(&id)
            && let Some(ids) = st.by_key.get_mut(&live.key)
        {
            ids.retain(|o| *o != id);
            if ids.is_empty() {
                st.by_key.remove(&live.key);
            }
        }
    }
}

/// Installs the probe (and, with `RUST_LOG` set, a log to stderr).
pub(super) fn install_probe() -> anyhow::Result<Probe> {
    let probe = Probe::default();
    // The controller's `reconcile` span and the events inside it; nothing
    // else reaches the probe.
    let only_controller = filter::filter_fn(|m| {
        m.target() == "wasmctrl::control::controller" && (m.is_event() || m.name() == "reconcile")
    });
    let log = std::env::var_os("RUST_LOG").map(|_| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(tracing_subscriber::EnvFilter::from_default_env())
    });
    tracing_subscriber::registry()
        .with(probe.clone().with_filter(only_controller))
        .with(log)
        .try_init()
        .context("installing the tracing probe")?;
    Ok(probe)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` with the probe as the thread's subscriber.
    fn probed(f: impl FnOnce()) -> Probe {
        let probe = Probe::default();
        let only_controller = filter::filter_fn(|m| {
            m.target() == "wasmctrl::control::controller"
                && (m.is_event() || m.name() == "reconcile")
        });
        let subscriber =
            tracing_subscriber::registry().with(probe.clone().with_filter(only_controller));
        tracing::subscriber::with_default(subscriber, f);
        probe
    }

    fn reconcile(key: &str) -> tracing::Span {
        tracing::info_span!(target: "wasmctrl::control::controller", "reconcile", key = %key, digest = tracing::field::Empty)
    }

    fn done(span: &tracing::Span) {
        let _e = span.enter();
        tracing::debug!(target: "wasmctrl::control::controller", "reconciled");
    }

    #[test]
    fn two_versions_on_one_key_at_once_are_overlapping() {
        let probe = probed(|| {
            let a = reconcile("default/a");
            a.record("digest", "sha256:1");
            let b = reconcile("default/a");
            b.record("digest", "sha256:2");
            done(&a);
            done(&b);
        });
        let st = probe.0.lock().unwrap();
        assert_eq!(
            (st.overlapping.len(), st.concurrent.len(), st.reconciles),
            (1, 1, 2)
        );
    }

    #[test]
    fn sequential_reconciles_and_other_keys_are_not() {
        let probe = probed(|| {
            let a = reconcile("default/a");
            a.record("digest", "sha256:1");
            let other = reconcile("default/b");
            other.record("digest", "sha256:2");
            done(&a);
            // Released (disposition seen), span not closed yet.
            let b = reconcile("default/a");
            b.record("digest", "sha256:2");
            done(&b);
            done(&other);
            drop((a, b, other));
            let c = reconcile("default/a");
            c.record("digest", "sha256:1");
            done(&c);
        });
        let st = probe.0.lock().unwrap();
        assert_eq!(
            (st.overlapping.len(), st.concurrent.len(), st.reconciles),
            (0, 0, 4)
        );
        assert!(st.live.is_empty() && st.by_key.is_empty());
    }

    #[test]
    fn the_armed_digest_times_its_first_reconcile() {
        let probe = Probe::default();
        probe.arm("sha256:2");
        let p = probe.clone();
        let only_controller = filter::filter_fn(|m| m.target() == "wasmctrl::control::controller");
        let subscriber = tracing_subscriber::registry().with(p.with_filter(only_controller));
        tracing::subscriber::with_default(subscriber, || {
            let old = reconcile("default/a");
            old.record("digest", "sha256:1");
            done(&old);
            assert_eq!(probe.first(), (None, None));
            let new = reconcile("default/b");
            new.record("digest", "sha256:2");
            assert!(probe.first().0.is_some() && probe.first().1.is_none());
            done(&new);
        });
        assert!(probe.first().1.is_some());
    }
}
