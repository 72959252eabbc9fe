//! Applying an object's plugin config off the objects controller's
//! workers: starting or rebuilding its plugin (a download, a compile) runs
//! as a task of its own, and a reconcile waits [`APPLY_PATIENCE`] for it,
//! then lets its worker go. The task queues the object again when it ends
//! if no reconcile was waiting for it by then.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt as _;

use super::spec::Refusal;
use super::{Host, ObjectPlugins};
use crate::ObjectKey;
use crate::config::PluginConfig;

/// How long a reconcile of an object waits for its plugin to start or
/// rebuild before it lets its worker go (the apply goes on, and queues the
/// object again when it ends).
const APPLY_PATIENCE: Duration = Duration::from_secs(2);

/// How applying an object's plugin config ended.
pub(super) type Outcome = Result<(), (Refusal, Option<PluginConfig>)>;

/// An object's plugin config being applied: a task of its own, so that a
/// download its author made stall holds no worker.
pub(super) struct Applying {
    config: PluginConfig,
    outcome: futures::future::Shared<futures::future::BoxFuture<'static, Outcome>>,
    abort: tokio::task::AbortHandle,
    ends: Arc<Mutex<Ends>>,
}

/// How an apply and the reconciles waiting for it part: a reconcile that
/// stops waiting marks it abandoned, and the apply then queues the object
/// again when it ends; one that got its outcome handled it, so it is not
/// queued again (a transient failure then waits for its backoff).
#[derive(Default)]
struct Ends {
    finished: bool,
    abandoned: bool,
}

impl ObjectPlugins {
    /// Stops applying object `name`'s plugin config, if that is under way.
    pub(super) fn stop_applying(&self, name: &str) {
        if let Some(applying) = self.applying.lock().unwrap().remove(name) {
            applying.abort.abort();
        }
    }

    /// Stops every apply under way (the host is stopping).
    pub(super) fn stop_all_applying(&self) {
        for (_, applying) in std::mem::take(&mut *self.applying.lock().unwrap()) {
            applying.abort.abort();
        }
    }
}

impl Host {
    /// Applies `config` ([`Host::apply_object`]) in a task of its own and
    /// waits [`APPLY_PATIENCE`] for it: its outcome, or None while it goes
    /// on. An apply of the same config under way is waited for again; one
    /// of an older config is stopped first.
    pub(super) async fn apply_patiently(
        self: &Arc<Self>,
        objects: &ObjectPlugins,
        config: PluginConfig,
    ) -> Option<Outcome> {
        let name = config.name.clone();
        let outcome = {
            let mut applying = objects.applying.lock().unwrap();
            match applying.get(&name) {
                Some(a) if a.config == config => (a.outcome.clone(), a.ends.clone()),
                other => {
                    if let Some(old) = other {
                        old.abort.abort();
                    }
                    let (host, tried, key) = (self.clone(), config.clone(), name.clone());
                    let ends = Arc::new(Mutex::new(Ends::default()));
                    let ended = ends.clone();
                    let task = tokio::spawn(async move {
                        let Some(objects) = &host.objects else {
                            return Ok(());
                        };
                        let outcome = host.apply_object(objects, tried).await;
                        let mut ended = ended.lock().unwrap();
                        ended.finished = true;
                        if ended.abandoned {
                            objects.queue.add(ObjectKey::cluster(key));
                        }
                        outcome
                    });
                    let abort = task.abort_handle();
                    let outcome = async move {
                        match task.await {
                            Ok(outcome) => outcome,
                            Err(e) => Err((
                                Refusal::new("LoadFailed", format!("loading stopped: {e}"))
                                    .transient(),
                                None,
                            )),
                        }
                    }
                    .boxed()
                    .shared();
                    applying.insert(
                        name.clone(),
                        Applying {
                            config,
                            outcome: outcome.clone(),
                            abort,
                            ends: ends.clone(),
                        },
                    );
                    (outcome, ends)
                }
            }
        };
        let (outcome, ends) = outcome;
        let done = match tokio::time::timeout(APPLY_PATIENCE, outcome.clone()).await {
            Ok(done) => done,
            Err(_) => {
                let ended = {
                    let mut ends = ends.lock().unwrap();
                    ends.abandoned = !ends.finished;
                    ends.finished
                };
                if !ended {
                    return None;
                }
                // It ended meanwhile: its outcome is a poll away.
                outcome.clone().await
            }
        };
        let mut applying = objects.applying.lock().unwrap();
        if applying
            .get(&name)
            .is_some_and(|a| a.outcome.ptr_eq(&outcome))
        {
            applying.remove(&name);
        }
        Some(done)
    }
}
