//! An admission plugin for tests: what a webhook author, careless or
//! hostile, could do to the host through `validate` and `mutate`, chosen
//! by the reviewed ConfigMap's name, so that tests can show the host
//! answering each by its rules while it stays up.
//!
//! | name prefix | validate | mutate |
//! |---|---|---|
//! | `loop`   | spins forever (stopped at the review's deadline) | — |
//! | `write`  | tries to create a ConfigMap; denies with the error it got | — |
//! | `read`   | reads ConfigMap `source` of its namespace; allows with a warning quoting its `data.value` | — |
//! | `deny`   | denies with a field error on `data.value` (422) | — |
//! | `forbid` | denies with a message (403) | — |
//! | `rename` | — | changes `metadata.name` |
//! | `move`   | — | changes `metadata.namespace` |
//! | `huge`   | — | adds 10 MiB to `data` |
//! | anything else | allows | labels it `gatekeeper: seen` |
//!
//! Its webhooks have a 1 s timeout and failurePolicy Fail; with
//! `--features ignore-failures`, Ignore. `--features review-secrets` also
//! reviews Secrets, which its permissions do not let it read (the host
//! refuses to load it).

use wasmctrl_sdk::admission::{
    AdmissionRequest, Defaulter, Denied, FieldErrors, Operation, Validator, Warnings, Webhook,
};
use wasmctrl_sdk::k8s_openapi::api::core::v1::ConfigMap;
use wasmctrl_sdk::{Action, Api, Context, Error, Metadata, ObjectKey, Reconciler, Resource};

struct Gatekeeper;

impl Reconciler for Gatekeeper {
    fn metadata() -> Metadata {
        Metadata::new("gatekeeper", "0.1.0", ConfigMap::gvk()).permission(
            "",
            &["configmaps"],
            &["get", "list", "watch", "create"],
        )
    }

    fn reconcile(_: ObjectKey, _: &Context) -> Result<Action, Error> {
        Ok(Action::done())
    }
}

fn webhook() -> Webhook {
    let mut w =
        Webhook::for_kind::<ConfigMap>(&[Operation::Create, Operation::Update]).timeout_seconds(1);
    if cfg!(feature = "ignore-failures") {
        w = w.ignore_failures();
    }
    if cfg!(feature = "review-secrets") {
        w = w.rule("", "v1", &["secrets"], &[Operation::Create]);
    }
    w
}

fn name(cm: &ConfigMap) -> &str {
    cm.metadata.name.as_deref().unwrap_or_default()
}

impl Validator for Gatekeeper {
    type Kind = ConfigMap;

    fn webhook() -> Webhook {
        webhook()
    }

    fn validate_create(cm: &ConfigMap, request: &AdmissionRequest) -> Result<Warnings, Denied> {
        let namespace = request.namespace.as_deref().unwrap_or("default");
        let api = Api::<ConfigMap>::namespaced(namespace);
        match name(cm) {
            n if n.starts_with("loop") => {
                let mut spins = 0u64;
                loop {
                    spins = std::hint::black_box(spins.wrapping_add(1));
                }
            }
            n if n.starts_with("write") => {
                let mut other = ConfigMap::default();
                other.metadata.name = Some(format!("{n}-side-effect"));
                match api.create(&other) {
                    Ok(_) => Ok(Warnings::new()),
                    Err(e) => Err(Denied::new(format!("write refused: {e}"))),
                }
            }
            n if n.starts_with("read") => {
                let source = api.get("source")?;
                let value = source
                    .data
                    .and_then(|d| d.get("value").cloned())
                    .unwrap_or_default();
                Ok(vec![format!("source says {value}")])
            }
            n if n.starts_with("forbid") => Err(Denied::new("forbidden by the gatekeeper")),
            n if n.starts_with("deny") => {
                let mut errors = FieldErrors::new();
                errors.invalid("data.value", "bad", "must not be bad");
                errors.into_result(cm)?;
                Ok(Warnings::new())
            }
            _ => Ok(Warnings::new()),
        }
    }
}

impl Defaulter for Gatekeeper {
    type Kind = ConfigMap;

    fn webhook() -> Webhook {
        webhook()
    }

    fn default(cm: &mut ConfigMap, _: &AdmissionRequest) -> Result<(), Denied> {
        let n = name(cm).to_string();
        if n.starts_with("rename") {
            cm.metadata.name = Some(format!("{n}-renamed"));
        } else if n.starts_with("move") {
            cm.metadata.namespace = Some("elsewhere".into());
        } else if n.starts_with("huge") {
            cm.data
                .get_or_insert_with(Default::default)
                .insert("huge".into(), "x".repeat(10 << 20));
        } else {
            cm.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert("gatekeeper".into(), "seen".into());
        }
        Ok(())
    }
}

wasmctrl_sdk::export_reconciler!(Gatekeeper, validator: Gatekeeper, defaulter: Gatekeeper);
