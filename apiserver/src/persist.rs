//! `--data-dir` persistence in a redb database: every committed write is
//! queued to a blocking writer thread that batches them into one durable
//! transaction, so a burst of writes costs one fsync, not one each. On start
//! the objects and the resourceVersion counter are loaded back, so
//! resourceVersions keep increasing across restarts.

use std::path::Path;
use std::thread::JoinHandle;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::resources::GroupResource;
use crate::storage::{ObjKey, PersistOp};

/// Objects, keyed `group \0 resource \0 namespace \0 name`, JSON values.
const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
/// Counters; `rv` is the highest resourceVersion ever committed.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Most writes folded into one transaction.
const BATCH: usize = 4096;

/// Why the database could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("creating data directory {path}: {source}")]
    Dir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("database: {0}")]
    Db(#[from] redb::Error),
    #[error("corrupt record {key}: {message}")]
    Corrupt { key: String, message: String },
}

fn db_err(e: impl Into<redb::Error>) -> PersistError {
    PersistError::Db(e.into())
}

fn key_of(gr: &GroupResource, key: &ObjKey) -> String {
    format!("{}\0{}\0{}\0{}", gr.group, gr.resource, key.0, key.1)
}

/// Credentials kept with the data: the bearer token and the CA.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Credentials {
    pub token: String,
    pub ca_cert: String,
    pub ca_key: String,
}

/// Reads `dir/credentials.json`, creating it (mode 0600) on first use.
pub fn credentials(dir: &Path) -> Result<Credentials, PersistError> {
    let io = |source| PersistError::Dir {
        path: dir.display().to_string(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let path = dir.join("credentials.json");
    if let Ok(bytes) = std::fs::read(&path) {
        return serde_json::from_slice(&bytes).map_err(|e| PersistError::Corrupt {
            key: path.display().to_string(),
            message: e.to_string(),
        });
    }
    let ca = crate::tls::Ca::generate().map_err(|e| PersistError::Corrupt {
        key: "ca".into(),
        message: e.to_string(),
    })?;
    let creds = Credentials {
        token: crate::util::random_token(),
        ca_cert: ca.cert_pem.clone(),
        ca_key: ca.key_pem(),
    };
    let json = serde_json::to_string_pretty(&creds).map_err(|e| PersistError::Corrupt {
        key: path.display().to_string(),
        message: e.to_string(),
    })?;
    crate::kubeconfig::write(&path, &json).map_err(|e| match e {
        crate::kubeconfig::KubeconfigError::Io { source, .. } => io(source),
    })?;
    Ok(creds)
}

/// Everything loaded from disk.
pub struct Loaded {
    pub rv: u64,
    pub objects: Vec<(GroupResource, ObjKey, u64, Value)>,
}

/// An open database and its writer thread.
pub struct Persister {
    writer: Option<JoinHandle<()>>,
}

/// Opens (or creates) `dir/state.redb` and loads its contents.
pub fn open(dir: &Path) -> Result<(Database, Loaded), PersistError> {
    std::fs::create_dir_all(dir).map_err(|source| PersistError::Dir {
        path: dir.display().to_string(),
        source,
    })?;
    let db = Database::create(dir.join("state.redb")).map_err(db_err)?;
    {
        // Make sure both tables exist so the first read finds them.
        let tx = db.begin_write().map_err(db_err)?;
        tx.open_table(OBJECTS).map_err(db_err)?;
        tx.open_table(META).map_err(db_err)?;
        tx.commit().map_err(db_err)?;
    }
    let tx = db.begin_read().map_err(db_err)?;
    let meta = tx.open_table(META).map_err(db_err)?;
    let rv = meta
        .get("rv")
        .map_err(db_err)?
        .map(|g| g.value())
        .unwrap_or(0);
    let table = tx.open_table(OBJECTS).map_err(db_err)?;
    let mut objects = Vec::new();
    for row in table.iter().map_err(db_err)? {
        let (k, v) = row.map_err(db_err)?;
        let key = k.value().to_string();
        let parts: Vec<&str> = key.split('\0').collect();
        let [group, resource, ns, name] = parts.as_slice() else {
            return Err(PersistError::Corrupt {
                key,
                message: "malformed key".into(),
            });
        };
        let obj: Value = serde_json::from_slice(v.value()).map_err(|e| PersistError::Corrupt {
            key: key.clone(),
            message: e.to_string(),
        })?;
        let orv = crate::util::meta_str(&obj, "resourceVersion")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        objects.push((
            GroupResource::new(group, resource),
            (ns.to_string(), name.to_string()),
            orv,
            obj,
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
    pub fn start(db: Database, rx: mpsc::UnboundedReceiver<PersistOp>) -> Persister {
        let writer = std::thread::Builder::new()
            .name("apiserver-persist".into())
            .spawn(move || writer_loop(db, rx))
            .ok();
        Persister { writer }
    }

    /// Waits for the queue to be written (after the store dropped its sender).
    pub fn join(mut self) {
        if let Some(h) = self.writer.take() {
            let _ = h.join();
        }
    }
}

fn writer_loop(db: Database, mut rx: mpsc::UnboundedReceiver<PersistOp>) {
    while let Some(first) = rx.blocking_recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        if let Err(e) = write_batch(&db, batch) {
            tracing::error!(error = %e, "persisting writes failed");
        }
    }
}

fn write_batch(db: &Database, batch: Vec<PersistOp>) -> Result<(), PersistError> {
    let tx = db.begin_write().map_err(db_err)?;
    let mut max_rv = 0;
    {
        let mut objects = tx.open_table(OBJECTS).map_err(db_err)?;
        for op in batch {
            match op {
                PersistOp::Put {
                    resource,
                    key,
                    json,
                    rv,
                } => {
                    objects
                        .insert(key_of(&resource, &key).as_str(), json.as_ref())
                        .map_err(db_err)?;
                    max_rv = max_rv.max(rv);
                }
                PersistOp::Delete { resource, key, rv } => {
                    objects
                        .remove(key_of(&resource, &key).as_str())
                        .map_err(db_err)?;
                    max_rv = max_rv.max(rv);
                }
                PersistOp::Rv(rv) => max_rv = max_rv.max(rv),
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
