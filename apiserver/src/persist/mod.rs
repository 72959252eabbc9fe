//! What the server keeps on disk, and the files it writes for clients.
//!
//! | File | Job |
//! |---|---|
//! | this one | `--data-dir`: the object database and `credentials.json` |
//! | [`kubeconfig`] | the kubeconfig clients load |
//! | [`files`] | private (0600), atomically replaced files |
//!
//! `--data-dir` persistence is a redb database: every staged write is
//! queued to a blocking writer thread that batches them into one durable
//! transaction, so a burst of writes costs one fsync, not one each. Only a
//! committed transaction makes its writes visible (and answers their
//! requests); a failed one discards every staged write, so memory always
//! equals disk (see [`crate::registry::storage`]). On start the objects and the
//! resourceVersion counter are loaded back, so resourceVersions keep
//! increasing across restarts.
//!
//! May import everything but [`crate::testing`]; only the crate root
//! imports it.

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::mpsc;

use crate::http::state::ServerState;
use crate::registry::resources::GroupResource;
use crate::registry::storage::{
    EventType, Json, ObjKey, PersistOp, nests_deeper_than, resource_version,
};

pub(crate) mod files;
pub(crate) mod kubeconfig;

/// Objects, keyed `group \0 resource \0 namespace \0 name`, JSON values.
const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
/// Counters; `rv` is the highest resourceVersion ever committed.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Most writes folded into one transaction, and most bytes of their
/// objects' JSON (a transaction is held in memory until committed: 4,096
/// writes of 3 MiB objects would be 12 GiB).
const BATCH: usize = 4096;
const BATCH_BYTES: usize = 64 << 20;

/// Why the database could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// A file or directory of the data directory could not be used.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The database failed.
    #[error("database: {0}")]
    Db(#[from] redb::Error),
    /// The database file could not be opened or read back: corrupt,
    /// truncated, or not a database.
    #[error("{path}: {source}")]
    Open {
        path: std::path::PathBuf,
        #[source]
        source: redb::Error,
    },
    /// A stored record (or `credentials.json`) cannot be read back.
    #[error("corrupt record {key}: {message}")]
    Corrupt { key: String, message: String },
    /// A failure a test asked for through `Faults::fail_persistence`.
    #[cfg(feature = "testing")]
    #[error("injected failure: {0}")]
    Injected(String),
}

fn db_err(e: impl Into<redb::Error>) -> PersistError {
    PersistError::Db(e.into())
}

/// [`db_err`] for the database file at `path`, while it is opened and read
/// back: the error names the file.
fn db_err_at<E: Into<redb::Error>>(path: &Path) -> impl Fn(E) -> PersistError + '_ {
    move |e| PersistError::Open {
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// The record key. Names are validated long before they get here, so a NUL
/// inside a part would be a bug; it is refused rather than written as a key
/// that would load back as a different object.
fn key_of(gr: &GroupResource, ns: &str, name: &str) -> Result<String, PersistError> {
    let parts = [gr.group.as_str(), gr.resource.as_str(), ns, name];
    if parts.iter().any(|p| p.contains('\0')) {
        return Err(PersistError::Corrupt {
            key: parts.join("/").escape_debug().to_string(),
            message: "a key part contains NUL".into(),
        });
    }
    Ok(parts.join("\0"))
}

/// Credentials kept with the data: the bearer token, the CA and the key
/// service-account tokens are signed with.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Credentials {
    pub(crate) token: String,
    pub(crate) ca_cert: String,
    pub(crate) ca_key: String,
    /// Base64 of the service-account token signing key; absent in data
    /// directories written before service-account tokens existed (it is
    /// added on their next start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) service_account_key: Option<String>,
}

impl Credentials {
    /// The service-account signing key, if present and well formed.
    pub(crate) fn service_account_key(&self) -> Option<Vec<u8>> {
        use base64::Engine;
        let key = base64::engine::general_purpose::STANDARD
            .decode(self.service_account_key.as_deref()?)
            .ok()?;
        (key.len() == crate::auth::sa_token::KEY_BYTES).then_some(key)
    }
}

fn write_credentials(path: &Path, creds: &Credentials) -> Result<(), PersistError> {
    let json = serde_json::to_string_pretty(creds).map_err(|e| PersistError::Corrupt {
        key: path.display().to_string(),
        message: e.to_string(),
    })?;
    crate::persist::files::write_private(path, json.as_bytes()).map_err(|source| PersistError::Io {
        what: format!("writing {}", path.display()),
        source,
    })
}

fn encoded_key(key: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(key)
}

/// The most `credentials.json` may hold: a token, a CA certificate and key,
/// and a signing key are a few KiB.
const MAX_CREDENTIALS_BYTES: u64 = 64 << 10;

/// The highest resourceVersion loaded back: the largest integer a JSON
/// number holds exactly (clients parse it as a string, but the counter
/// must have room to go on increasing).
const MAX_LOADED_RV: u64 = (1 << 53) - 1;

/// Reads `dir/credentials.json`, creating it (mode 0600) on first use and
/// adding a service-account signing key to one written without.
pub(crate) fn credentials(dir: &Path) -> Result<Credentials, PersistError> {
    crate::persist::files::create_private_dir(dir).map_err(|source| PersistError::Io {
        what: format!("data directory {}", dir.display()),
        source,
    })?;
    let path = dir.join("credentials.json");
    match crate::persist::files::read_private(&path, MAX_CREDENTIALS_BYTES) {
        Ok(Some(bytes)) => {
            let mut creds: Credentials =
                serde_json::from_slice(&bytes).map_err(|e| PersistError::Corrupt {
                    key: path.display().to_string(),
                    message: e.to_string(),
                })?;
            match (&creds.service_account_key, creds.service_account_key()) {
                (_, Some(_)) => {}
                (None, None) => {
                    creds.service_account_key =
                        Some(encoded_key(&crate::auth::sa_token::generate_key()));
                    write_credentials(&path, &creds)?;
                }
                // Never replace a key that is there but unreadable: tokens
                // signed with it would silently stop working.
                (Some(_), None) => {
                    return Err(PersistError::Corrupt {
                        key: path.display().to_string(),
                        message: format!(
                            "serviceAccountKey is not the base64 of {} bytes",
                            crate::auth::sa_token::KEY_BYTES
                        ),
                    });
                }
            }
            return Ok(creds);
        }
        // Only a missing file means "first start"; anything else must not
        // silently replace the credentials existing kubeconfigs carry.
        Ok(None) => {}
        Err(source) => {
            return Err(PersistError::Io {
                what: format!("reading {}", path.display()),
                source,
            });
        }
    }
    let ca = crate::http::tls::Ca::generate().map_err(|e| PersistError::Corrupt {
        key: "ca".into(),
        message: e.to_string(),
    })?;
    let creds = Credentials {
        token: crate::values::random_token(),
        ca_cert: ca.cert_pem.clone(),
        ca_key: ca.key_pem(),
        service_account_key: Some(encoded_key(&crate::auth::sa_token::generate_key())),
    };
    write_credentials(&path, &creds)?;
    Ok(creds)
}

/// Everything loaded from disk.
pub(crate) struct Loaded {
    pub(crate) rv: u64,
    /// Each object's JSON as stored, checked to be a JSON object of
    /// UTF-8 text within the depth objects may have, but not parsed into a
    /// tree: at a million objects the trees would take gigabytes at once.
    pub(crate) objects: Vec<(GroupResource, ObjKey, u64, Json)>,
}

/// The writer thread of an open database; it owns the database.
pub(crate) struct Persister {
    writer: Option<JoinHandle<()>>,
}

/// Opens (or creates) `dir/state.redb` and loads its contents.
pub(crate) fn open(dir: &Path) -> Result<(Database, Loaded), PersistError> {
    crate::persist::files::create_private_dir(dir).map_err(|source| PersistError::Io {
        what: format!("data directory {}", dir.display()),
        source,
    })?;
    let path = dir.join("state.redb");
    let file = crate::persist::files::open_private(&path).map_err(|source| PersistError::Io {
        what: format!("opening {}", path.display()),
        source,
    })?;
    // Every page's checksum is verified at open: a file altered outside
    // redb is refused as corrupt, where a plain open trusts it and may
    // panic.
    let backend = redb::backends::FileBackend::new(file).map_err(db_err_at(&path))?;
    let db = Database::builder()
        .set_check_integrity_on_open(true)
        .create_with_backend(backend)
        .map_err(db_err_at(&path))?;
    // The database holds Secrets: readable by this user only.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(
            |source| PersistError::Io {
                what: format!("restricting {}", path.display()),
                source,
            },
        )?;
    }
    {
        // Make sure both tables exist so the first read finds them.
        let tx = db.begin_write().map_err(db_err_at(&path))?;
        tx.open_table(OBJECTS).map_err(db_err_at(&path))?;
        tx.open_table(META).map_err(db_err_at(&path))?;
        tx.commit().map_err(db_err_at(&path))?;
    }
    let tx = db.begin_read().map_err(db_err_at(&path))?;
    let meta = tx.open_table(META).map_err(db_err_at(&path))?;
    let rv = meta
        .get("rv")
        .map_err(db_err_at(&path))?
        .map(|g| g.value())
        .unwrap_or(0);
    if rv > MAX_LOADED_RV {
        return Err(PersistError::Corrupt {
            key: format!("{} (rv)", path.display()),
            message: format!("the resourceVersion counter {rv} is past {MAX_LOADED_RV}"),
        });
    }
    let table = tx.open_table(OBJECTS).map_err(db_err_at(&path))?;
    let mut objects = Vec::new();
    for row in table.iter().map_err(db_err_at(&path))? {
        let (k, v) = row.map_err(db_err_at(&path))?;
        let key = k.value().to_string();
        let parts: Vec<&str> = key.split('\0').collect();
        let [group, resource, ns, name] = parts.as_slice() else {
            return Err(PersistError::Corrupt {
                key,
                message: "malformed key".into(),
            });
        };
        // No write stores more; a larger row was not written by this server.
        let bytes = v.value().len();
        if bytes > crate::registry::storage::MAX_OBJECT_BYTES {
            return Err(PersistError::Corrupt {
                key,
                message: format!(
                    "the object is {bytes} bytes, more than an object may be ({})",
                    crate::registry::storage::MAX_OBJECT_BYTES
                ),
            });
        }
        let json = v.value();
        if let Err(e) = std::str::from_utf8(json) {
            return Err(PersistError::Corrupt {
                key,
                message: format!("the object is not UTF-8 text: {e}"),
            });
        }
        if nests_deeper_than(json, crate::registry::storage::MAX_OBJECT_DEPTH) {
            return Err(PersistError::Corrupt {
                key,
                message: format!(
                    "the object nests more than {} levels deep, more than an object may",
                    crate::registry::storage::MAX_OBJECT_DEPTH
                ),
            });
        }
        let orv: u64 = resource_version(json)
            .map_err(|e| PersistError::Corrupt {
                key: key.clone(),
                message: e.to_string(),
            })?
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        if orv > MAX_LOADED_RV {
            return Err(PersistError::Corrupt {
                key,
                message: format!("resourceVersion {orv} is past {MAX_LOADED_RV}"),
            });
        }
        objects.push((
            GroupResource::new(group, resource),
            (ns.to_string(), name.to_string()),
            orv,
            Json::from(Box::<[u8]>::from(json)),
        ));
    }
    drop(table);
    drop(meta);
    drop(tx);
    Ok((db, Loaded { rv, objects }))
}

impl Persister {
    /// Starts the writer thread; it exits once every sender is dropped and
    /// the queue is drained.
    pub(crate) fn start(
        db: Database,
        rx: mpsc::UnboundedReceiver<PersistOp>,
        shared: Arc<ServerState>,
    ) -> Result<Persister, PersistError> {
        let writer = std::thread::Builder::new()
            .name("apiserver-persist".into())
            .spawn(move || writer_loop(db, rx, &shared))
            .map_err(|source| PersistError::Io {
                what: "starting the persistence thread".into(),
                source,
            })?;
        Ok(Persister {
            writer: Some(writer),
        })
    }

    /// Waits for the queue to be written (after the store dropped its sender).
    pub(crate) fn join(mut self) {
        if let Some(h) = self.writer.take() {
            let _ = h.join();
        }
    }
}

/// Why a queued write was discarded without being tried: an earlier batch
/// failed, and it may build on a write of that batch.
const DISCARDED: &str = "an earlier write it may depend on could not be persisted";

/// `first` and what else is queued, up to `max_ops` operations and until
/// they write `max_bytes` (at least `first`, whatever its size).
fn next_batch<T>(
    first: T,
    rx: &mut mpsc::UnboundedReceiver<T>,
    bytes_of: impl Fn(&T) -> usize,
    max_ops: usize,
    max_bytes: usize,
) -> Vec<T> {
    let mut bytes = bytes_of(&first);
    let mut batch = vec![first];
    while batch.len() < max_ops && bytes < max_bytes {
        match rx.try_recv() {
            Ok(op) => {
                bytes += bytes_of(&op);
                batch.push(op);
            }
            Err(_) => break,
        }
    }
    batch
}

fn writer_loop(db: Database, mut rx: mpsc::UnboundedReceiver<PersistOp>, shared: &ServerState) {
    while let Some(first) = rx.blocking_recv() {
        let batch = next_batch(first, &mut rx, PersistOp::bytes, BATCH, BATCH_BYTES);
        // Only this thread changes the epoch, so it cannot move meanwhile.
        let epoch = shared.objects.store.epoch();
        let (live, stale): (Vec<PersistOp>, Vec<PersistOp>) =
            batch.into_iter().partition(|op| op.epoch() == epoch);
        for op in stale {
            if let PersistOp::Write { done, .. } = op {
                done.resolve(Err(DISCARDED.into()));
            }
        }
        if live.is_empty() {
            continue;
        }
        let result = write_or_fail(&db, &live, shared);
        let mut events = Vec::with_capacity(live.len());
        let mut dones = Vec::with_capacity(live.len());
        for op in live {
            if let PersistOp::Write { event, done, .. } = op {
                events.push(event);
                dones.push(done);
            }
        }
        let outcome: Result<(), Arc<str>> = match result {
            Ok(()) => {
                shared.objects.store.apply_durable(events);
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, writes = dones.len(), "persisting writes failed; discarding them");
                shared.objects.store.abort_staged();
                Err(format!("persisting the write failed: {e}").into())
            }
        };
        for done in dones {
            done.resolve(outcome.clone());
        }
    }
}

/// Writes the batch, unless a test asked persistence to fail.
fn write_or_fail(
    db: &Database,
    batch: &[PersistOp],
    shared: &ServerState,
) -> Result<(), PersistError> {
    #[cfg(feature = "testing")]
    if let Some(message) = shared.faults.persistence_failure() {
        return Err(PersistError::Injected(message));
    }
    #[cfg(not(feature = "testing"))]
    let _ = shared;
    write_batch(db, batch)
}

fn write_batch(db: &Database, batch: &[PersistOp]) -> Result<(), PersistError> {
    let tx = db.begin_write().map_err(db_err)?;
    let mut max_rv = 0;
    {
        let mut objects = tx.open_table(OBJECTS).map_err(db_err)?;
        for op in batch {
            match op {
                PersistOp::Write { event, .. } => {
                    let key = key_of(&event.resource, &event.namespace, &event.name)?;
                    if event.etype == EventType::Deleted {
                        objects.remove(key.as_str()).map_err(db_err)?;
                    } else {
                        objects
                            .insert(key.as_str(), event.object.as_ref())
                            .map_err(db_err)?;
                    }
                    max_rv = max_rv.max(event.rv);
                }
                PersistOp::Rv { rv, .. } => max_rv = max_rv.max(*rv),
            }
        }
        let mut meta = tx.open_table(META).map_err(db_err)?;
        let old = meta
            .get("rv")
            .map_err(db_err)?
            .map(|g| g.value())
            .unwrap_or(0);
        meta.insert("rv", old.max(max_rv)).map_err(db_err)?;
    }
    tx.commit().map_err(db_err)?;
    Ok(())
}

#[cfg(test)]
mod batch_tests {
    use super::*;

    #[test]
    fn a_batch_stops_at_its_operations_or_its_bytes() {
        let (tx, mut rx) = mpsc::unbounded_channel::<usize>();
        for _ in 0..100 {
            tx.send(1 << 20).unwrap();
        }
        let batch = next_batch(1 << 20, &mut rx, |b| *b, BATCH, 8 << 20);
        assert_eq!(batch.len(), 8, "8 MiB of 1 MiB writes");
        let batch = next_batch(0, &mut rx, |b| *b, 5, usize::MAX);
        assert_eq!(batch.len(), 5);
        let huge = next_batch(64 << 20, &mut rx, |b| *b, BATCH, 8 << 20);
        assert_eq!(huge.len(), 1, "a write past the bytes alone");
    }
}

#[cfg(test)]
mod open_tests {
    use super::*;

    #[test]
    fn a_resource_version_past_what_json_holds_is_refused_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let (db, _) = open(dir.path()).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(META).unwrap().insert("rv", u64::MAX).unwrap();
        tx.commit().unwrap();
        drop(db);
        let Err(e) = open(dir.path()) else {
            panic!("loaded a counter that cannot go on increasing");
        };
        assert!(e.to_string().contains("past 9007199254740991"), "{e}");
    }

    /// Why a data directory whose database holds the row `key` = `bytes`,
    /// stored behind the server's back, is refused at load.
    fn refused_with_row(key: &str, bytes: &[u8]) -> PersistError {
        let dir = tempfile::tempdir().unwrap();
        let (db, _) = open(dir.path()).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(OBJECTS).unwrap().insert(key, bytes).unwrap();
        tx.commit().unwrap();
        drop(db);
        let Err(e) = open(dir.path()) else {
            panic!("loaded a row no write could have stored");
        };
        e
    }

    #[test]
    fn a_row_larger_or_deeper_than_any_object_is_refused_at_load() {
        let huge = format!("{{\"v\":\"{}\"}}", "x".repeat(4 << 20));
        let e = refused_with_row("\0configmaps\0default\0huge", huge.as_bytes());
        assert!(e.to_string().contains("more than an object may be"), "{e}");

        let deep = format!("{}{}", "[".repeat(120), "]".repeat(120));
        let e = refused_with_row("\0configmaps\0default\0deep", deep.as_bytes());
        assert!(e.to_string().contains("levels deep"), "{e}");
    }

    #[test]
    fn a_file_that_is_not_a_database_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("state.redb"), vec![0x5a; 64 << 10]).unwrap();
        let Err(e) = open(dir.path()) else {
            panic!("opened a file of noise");
        };
        assert!(e.to_string().contains("state.redb"), "{e}");
    }
}
