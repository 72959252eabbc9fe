//! Who is alive: one Lease, `<leaseName>-members`, whose annotation
//! [`MEMBERS_ANNOTATION`] maps each replica's identity to its last
//! heartbeat, the time on its wall clock (RFC 3339, microseconds). A
//! replica adds or refreshes its entry every `retryPeriod`; the write
//! carries the resourceVersion read, so concurrent heartbeats retry rather
//! than overwrite each other. One fixed name keeps the RBAC to named Leases
//! (a Lease per replica would need rights on every Lease).
//!
//! A heartbeat's time is for people: a replica judges another alive as
//! client-go judges a Lease (`control::lease`), on its own clock, from
//! when it saw that replica's entry change ([`Heartbeats`]). An entry
//! unchanged for `leaseDuration` is gone, and dropped at the next write,
//! however far apart the replicas' wall clocks are.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, ObjectMeta, PostParams};
use wasmctrl_apimachinery::time;

use crate::control::lease::{Clock, Observed, whole_seconds};

/// The annotation of the members Lease holding the heartbeats (JSON).
pub const MEMBERS_ANNOTATION: &str = "wasmctrl.dev/members";
/// Entries kept at most (the annotation stays far below Kubernetes' 256 KiB).
const MAX_MEMBERS: usize = 512;
/// Bytes of an identity kept (longer ones are not members: refused).
const MAX_IDENTITY: usize = 253;
/// Attempts per heartbeat when others write at the same time.
const ATTEMPTS: usize = 3;

/// The entries of the annotation: identity → heartbeat. Malformed entries
/// (an empty or overlong identity, a heartbeat that is not a time) are
/// left out.
fn parse(annotation: Option<&str>) -> BTreeMap<String, String> {
    let Some(text) = annotation else {
        return BTreeMap::new();
    };
    let Ok(map) = serde_json::from_str::<BTreeMap<String, String>>(text) else {
        return BTreeMap::new();
    };
    map.into_iter()
        .filter(|(id, t)| !id.is_empty() && id.len() <= MAX_IDENTITY && time::parse(t).is_ok())
        .collect()
}

/// Other replicas' heartbeats as this replica has seen them: per identity,
/// the heartbeat last read and when it changed, on this replica's clock.
#[derive(Debug, Default)]
pub(super) struct Heartbeats {
    seen: BTreeMap<String, Observed<String>>,
}

impl Heartbeats {
    /// Notes the annotation as read at `now`; identities no longer in it
    /// are forgotten. Returns its well-formed entries.
    pub(super) fn note(
        &mut self,
        annotation: Option<&str>,
        now: Instant,
    ) -> BTreeMap<String, String> {
        let entries = parse(annotation);
        self.seen.retain(|id, _| entries.contains_key(id));
        for (id, beat) in &entries {
            match self.seen.get_mut(id) {
                Some(seen) => seen.note(beat.clone(), now),
                None => {
                    self.seen
                        .insert(id.clone(), Observed::new(beat.clone(), now));
                }
            }
        }
        entries
    }

    /// Whether `id`'s heartbeat changed, as this replica saw it, less than
    /// `lifetime` before `now`.
    pub(super) fn alive(&self, id: &str, lifetime: Duration, now: Instant) -> bool {
        self.seen
            .get(id)
            .is_some_and(|o| !o.unchanged_for(lifetime, now))
    }

    /// When `id`'s heartbeat was seen to change.
    fn since(&self, id: &str) -> Option<Instant> {
        self.seen.get(id).map(Observed::since)
    }
}

/// The members Lease as one replica keeps it.
pub(super) struct Membership<'a> {
    pub(super) api: &'a Api<Lease>,
    pub(super) name: &'a str,
    pub(super) identity: &'a str,
    pub(super) lifetime: Duration,
    pub(super) clock: &'a dyn Clock,
    pub(super) heartbeats: Heartbeats,
}

impl Membership<'_> {
    /// Records this replica's heartbeat and returns the live members
    /// (this replica among them), sorted.
    pub(super) async fn heartbeat(&mut self) -> Result<Vec<String>, kube::Error> {
        let mut last = None;
        for _ in 0..ATTEMPTS {
            match self.write(true).await {
                Ok(members) => return Ok(members),
                Err(kube::Error::Api(s)) if s.code == 409 => last = Some(kube::Error::Api(s)),
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("a conflict was seen"))
    }

    /// Removes this replica's entry (on shutdown), so the others rebalance
    /// at once instead of after `leaseDuration`.
    pub(super) async fn leave(&mut self) -> Result<(), kube::Error> {
        for _ in 0..ATTEMPTS {
            match self.write(false).await {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One read-modify-write: with `present`, this replica's entry is set
    /// to its wall clock's now, else removed; entries gone (unchanged for
    /// `lifetime` as this replica saw them) are dropped.
    async fn write(&mut self, present: bool) -> Result<Vec<String>, kube::Error> {
        let existing = self.api.get_opt(self.name).await?;
        let annotation = existing.as_ref().and_then(|l| {
            l.metadata
                .annotations
                .as_ref()?
                .get(MEMBERS_ANNOTATION)
                .cloned()
        });
        let now = self.clock.now();
        let mut members: BTreeMap<String, String> = self
            .heartbeats
            .note(annotation.as_deref(), now)
            .into_iter()
            .filter(|(id, _)| id != self.identity && self.heartbeats.alive(id, self.lifetime, now))
            .collect();
        if present {
            if members.len() >= MAX_MEMBERS {
                // The heartbeats longest unchanged go first.
                let mut by_age: Vec<(String, String)> = members.into_iter().collect();
                by_age.sort_by_key(|(id, _)| std::cmp::Reverse(self.heartbeats.since(id)));
                by_age.truncate(MAX_MEMBERS - 1);
                members = by_age.into_iter().collect();
            }
            members.insert(
                self.identity.to_string(),
                time::format_micros(self.clock.wall()),
            );
        }
        let text = serde_json::to_string(&members).expect("a map of strings serializes");
        let live: Vec<String> = members.into_keys().collect();
        match existing {
            None if !present => Ok(live),
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.to_string()),
                        annotations: Some([(MEMBERS_ANNOTATION.to_string(), text)].into()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        lease_duration_seconds: Some(whole_seconds(self.lifetime)),
                        ..LeaseSpec::default()
                    }),
                };
                // Created by another replica first: a 409, retried.
                self.api
                    .create(&PostParams::default(), &lease)
                    .await
                    .map(|_| live)
            }
            Some(mut lease) => {
                lease
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(MEMBERS_ANNOTATION.to_string(), text);
                self.api
                    .replace(self.name, &PostParams::default(), &lease)
                    .await?;
                Ok(live)
            }
        }
    }
}
