//! Who is alive: one Lease, `<leaseName>-members`, whose annotation
//! [`MEMBERS_ANNOTATION`] maps each replica's identity to the time of its
//! last heartbeat (RFC 3339). A replica adds or refreshes its
//! entry every `retryPeriod` and drops entries older than `leaseDuration`;
//! the write carries the resourceVersion read, so concurrent heartbeats
//! retry rather than overwrite each other. One fixed name keeps the RBAC to
//! named Leases (a Lease per replica would need rights on every Lease).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ObjectMeta, PostParams};

use super::lease::whole_seconds;

/// The annotation of the members Lease holding the heartbeats (JSON).
pub const MEMBERS_ANNOTATION: &str = "wasmctrl.dev/members";
/// Entries kept at most (the annotation stays far below Kubernetes' 256 KiB).
const MAX_MEMBERS: usize = 512;
/// Bytes of an identity kept (longer ones are not members: refused).
const MAX_IDENTITY: usize = 253;
/// Attempts per heartbeat when others write at the same time.
const ATTEMPTS: usize = 3;

/// The identities in `annotation` whose heartbeat is younger than
/// `lifetime` at `now`, sorted. Malformed entries are ignored.
pub fn live_members(annotation: Option<&str>, now: Timestamp, lifetime: Duration) -> Vec<String> {
    parse(annotation)
        .into_iter()
        .filter(|(_, seen)| alive(*seen, now, lifetime))
        .map(|(id, _)| id)
        .collect()
}

fn alive(seen: Timestamp, now: Timestamp, lifetime: Duration) -> bool {
    let lifetime = SignedDuration::try_from(lifetime).unwrap_or(SignedDuration::MAX);
    seen.checked_add(lifetime).is_ok_and(|until| until > now)
}

fn parse(annotation: Option<&str>) -> BTreeMap<String, Timestamp> {
    let Some(text) = annotation else {
        return BTreeMap::new();
    };
    let Ok(map) = serde_json::from_str::<BTreeMap<String, String>>(text) else {
        return BTreeMap::new();
    };
    map.into_iter()
        .filter(|(id, _)| !id.is_empty() && id.len() <= MAX_IDENTITY)
        .filter_map(|(id, t)| Some((id, t.parse::<Timestamp>().ok()?)))
        .collect()
}

/// The members Lease as one replica keeps it.
pub(super) struct Membership<'a> {
    pub(super) api: &'a Api<Lease>,
    pub(super) name: &'a str,
    pub(super) identity: &'a str,
    pub(super) lifetime: Duration,
}

impl Membership<'_> {
    /// Records this replica's heartbeat and returns the live members
    /// (this replica among them).
    pub(super) async fn heartbeat(&self) -> Result<Vec<String>, kube::Error> {
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
    pub(super) async fn leave(&self) -> Result<(), kube::Error> {
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
    /// to now, else removed; expired entries are dropped.
    async fn write(&self, present: bool) -> Result<Vec<String>, kube::Error> {
        let now = Timestamp::now();
        let existing = self.api.get_opt(self.name).await?;
        let annotation = existing.as_ref().and_then(|l| {
            l.metadata
                .annotations
                .as_ref()?
                .get(MEMBERS_ANNOTATION)
                .cloned()
        });
        let mut members: BTreeMap<String, Timestamp> = parse(annotation.as_deref())
            .into_iter()
            .filter(|(id, seen)| id != self.identity && alive(*seen, now, self.lifetime))
            .collect();
        if present {
            if members.len() >= MAX_MEMBERS {
                // The oldest heartbeats go first.
                let mut by_age: Vec<(String, Timestamp)> = members.into_iter().collect();
                by_age.sort_by_key(|(_, t)| std::cmp::Reverse(*t));
                by_age.truncate(MAX_MEMBERS - 1);
                members = by_age.into_iter().collect();
            }
            members.insert(self.identity.to_string(), now);
        }
        let text: BTreeMap<&String, String> =
            members.iter().map(|(id, t)| (id, t.to_string())).collect();
        let text = serde_json::to_string(&text).expect("a map of strings serializes");
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
