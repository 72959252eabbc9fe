//! A hostile reconciler: what a plugin author with bad intent would try,
//! chosen by the key's name, so that tests can show the host refusing each
//! attempt while it stays up, within its memory bound, and keeps
//! reconciling other keys.
//!
//! | name              | attempt                                                         |
//! |-------------------|-----------------------------------------------------------------|
//! | `inject`          | URL injection through every string argument of every `kube` call, and bodies over the host's payload ceiling; succeeds only if the host refused them all (as `invalid` or `forbidden`) |
//! | `output-flood`    | 64 MiB to stdout without a newline, then 100,000 short lines    |
//! | `log-flood`       | a million `log` calls of 64 KiB each                             |
//! | `host-call-flood` | `kube` calls in a loop until the host stops it                  |
//! | `resource-hoard`  | WASI pollables held until the host refuses one (its bound on WASI resources) |
//! | `patch-depth`     | with the setting `attack: true` (else as any other name): a 128 KiB JSON patch of 15 `copy` operations that would nest its ConfigMap 32,767 levels deep |
//! | `patch-copies`    | with `attack: true`: a 2 KiB JSON patch of 30 `copy` operations, each doubling the ConfigMap (a 512 GiB result) |
//! | `tiny-values-*`   | 8 creates and 8 JSON patches, each a 3.9 MiB body of a million tiny JSON values (a tree of them is about 16 times the text) |
//! | `big-list`        | lists every ConfigMap (refused past the plugin's `listBytes`)    |
//! | `api-flood`       | patches its ConfigMap 1,000 times (held to the plugin's `apiQps`) |
//! | `huge-error`      | fails with an 8 MiB error message                                |
//! | anything else     | labels its ConfigMap `wasmctrl.dev/hostile: reconciled`          |
//!
//! `--features watch-secret` declares a Secret watch its grant does not
//! cover; `--features block-in-metadata` sleeps for an hour in `metadata`
//! (a guest blocked in a WASI poll, which epochs cannot interrupt);
//! `--features huge-metadata` declares 33 owned kinds (the host takes 32).

use std::io::Write;

use wasmctrl_sdk::bindings::wasmctrl::reconciler::kube::{
    self, ApplyPatch, Event, EventType, ObjectPatch,
};
use wasmctrl_sdk::bindings::wasmctrl::reconciler::types::{ApiError, Gvk};
use wasmctrl_sdk::{Action, Context, Error, Metadata, ObjectKey, Reconciler};

struct Hostile;

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
    }
}

fn configmaps() -> Gvk {
    gvk("", "v1", "ConfigMap")
}

impl Reconciler for Hostile {
    fn metadata() -> Metadata {
        #[cfg(feature = "block-in-metadata")]
        std::thread::sleep(std::time::Duration::from_secs(3600));
        let for_kind = if cfg!(feature = "watch-secret") {
            wasmctrl_sdk::Gvk::new("", "v1", "Secret")
        } else {
            wasmctrl_sdk::Gvk::new("", "v1", "ConfigMap")
        };
        let metadata = Metadata::new("hostile", "0.1.0", for_kind).permission(
            "",
            &["configmaps"],
            &["get", "list", "watch", "patch", "create"],
        );
        if cfg!(feature = "huge-metadata") {
            // One kind past the host's bound of 32.
            return (0..33).fold(metadata, |m, i| {
                m.owns(wasmctrl_sdk::Gvk::new(
                    "example.com",
                    "v1",
                    &format!("Kind{i}"),
                ))
            });
        }
        metadata
    }

    fn reconcile(key: ObjectKey, ctx: &Context) -> Result<Action, Error> {
        let ns = key.namespace.as_deref();
        match key.name.as_str() {
            "inject" => inject(ns),
            "output-flood" => {
                let chunk = vec![b'x'; 64 << 10];
                let mut out = std::io::stdout();
                for _ in 0..(64 << 20) / chunk.len() {
                    let _ = out.write_all(&chunk);
                }
                for i in 0..100_000 {
                    let _ = writeln!(out, "line {i}");
                }
                Ok(Action::done())
            }
            "log-flood" => {
                let message = "y".repeat(64 << 10);
                for _ in 0..1_000_000 {
                    wasmctrl_sdk::info!("{message}");
                }
                Ok(Action::done())
            }
            "host-call-flood" => loop {
                let _ = kube::get(&configmaps(), ns, "host-call-flood");
            },
            "resource-hoard" => {
                // Pollables held, never dropped, until the host refuses one.
                let mut held = Vec::new();
                loop {
                    held.push(wasip2::clocks::monotonic_clock::subscribe_duration(
                        3_600_000_000_000,
                    ));
                }
            }
            "patch-depth" if attacks(ctx) => json_patch(ns, "patch-depth", &deep_patch(15)),
            "patch-copies" if attacks(ctx) => json_patch(ns, "patch-copies", &copies_patch(30)),
            name if name.starts_with("tiny-values") => tiny_values(ns, name),
            "big-list" => {
                kube::list(&configmaps(), ns, None)?;
                Ok(Action::done())
            }
            "api-flood" => {
                let patch = r#"{"metadata":{"labels":{"wasmctrl.dev/flood":"x"}}}"#;
                for _ in 0..1_000 {
                    kube::patch(
                        &configmaps(),
                        ns,
                        "api-flood",
                        &ObjectPatch::Merge(patch.into()),
                    )?;
                }
                Ok(Action::done())
            }
            "huge-error" => Err(Error::transient("e".repeat(8 << 20))),
            name => {
                let patch = r#"{"metadata":{"labels":{"wasmctrl.dev/hostile":"reconciled"}}}"#;
                match kube::patch(&configmaps(), ns, name, &ObjectPatch::Merge(patch.into())) {
                    Ok(_) | Err(ApiError::NotFound(_)) => Ok(Action::done()),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }
}

/// Every call must come back `invalid` or `forbidden`; the reconcile fails
/// permanently, naming the attempt, if one did not.
fn inject(ns: Option<&str>) -> Result<Action, Error> {
    let cm = configmaps();
    let pod_json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"evil"},"spec":{"containers":[{"name":"c","image":"evil"}]}}"#;
    let cm_json = |name: &str, namespace: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"{namespace}"}}}}"#
        )
    };
    let bad_namespaces = [
        "default/pods?x=",
        "default/../../api/v1/namespaces/default/pods",
        "default%2Fpods",
        "Default",
        "default\0",
        "",
    ];
    let bad_names = [
        "web/status",
        "web/scale",
        "../secrets/x",
        "x?watch=1",
        "x#frag",
        "%2Fx",
        "x\0y",
        "x\ny",
        ".",
        "..",
        "",
    ];
    let bad_kinds = [
        gvk("apps/v1?", "v1", "Deployment"),
        gvk("", "v1/../..", "ConfigMap"),
        gvk("", "v1", "Pod/x"),
        gvk("", "v1 ", "ConfigMap"),
        gvk("", "v1", ""),
    ];
    let mut attempts: Vec<(String, Result<(), ApiError>)> = Vec::new();
    let mut record = |what: String, r: Result<(), ApiError>| attempts.push((what, r));
    for bad in bad_namespaces {
        record(
            format!("create in namespace {bad:?}"),
            kube::create(&cm, Some(bad), &cm_json("x", bad)).map(drop),
        );
        record(
            format!("get in namespace {bad:?}"),
            kube::get(&cm, Some(bad), "x").map(drop),
        );
        record(
            format!("list in namespace {bad:?}"),
            kube::list(&cm, Some(bad), None).map(drop),
        );
    }
    for bad in bad_names {
        record(
            format!("get name {bad:?}"),
            kube::get(&cm, ns, bad).map(drop),
        );
        record(
            format!("patch name {bad:?}"),
            kube::patch(&cm, ns, bad, &ObjectPatch::Merge("{}".into())).map(drop),
        );
        record(format!("delete name {bad:?}"), kube::delete(&cm, ns, bad));
        record(
            format!("replace name {bad:?}"),
            kube::replace(&cm, ns, bad, &cm_json(bad, ns.unwrap_or_default())).map(drop),
        );
    }
    for bad in &bad_kinds {
        record(
            format!("get kind {bad:?}"),
            kube::get(bad, ns, "x").map(drop),
        );
    }
    for bad in [
        "a=b&watch=true",
        "a in (x)/../..",
        "a=b?x",
        &"a".repeat(10_000),
    ] {
        record(
            format!("list selector {:?}", &bad[..bad.len().min(20)]),
            kube::list(&cm, ns, Some(bad)).map(drop),
        );
    }
    // A Pod through the ConfigMap resource, or a ConfigMap of another namespace.
    record(
        "create a Pod body as a ConfigMap".into(),
        kube::create(&cm, ns, pod_json).map(drop),
    );
    record(
        "create into kube-system through default".into(),
        kube::create(&cm, ns, &cm_json("evil", "kube-system")).map(drop),
    );
    record(
        "apply a Pod body as a ConfigMap".into(),
        kube::patch(
            &cm,
            ns,
            "evil",
            &ObjectPatch::Apply(ApplyPatch {
                body: pod_json.into(),
                field_manager: "hostile".into(),
                force: true,
            }),
        )
        .map(drop),
    );
    record(
        "apply with a field manager holding a newline".into(),
        kube::patch(
            &cm,
            ns,
            "evil",
            &ObjectPatch::Apply(ApplyPatch {
                body: cm_json("evil", ns.unwrap_or_default()),
                field_manager: "x\r\nX-Evil: 1".into(),
                force: false,
            }),
        )
        .map(drop),
    );
    // Kinds and subresources the grant never named.
    record(
        "get a Secret".into(),
        kube::get(&gvk("", "v1", "Secret"), ns, "x").map(drop),
    );
    record(
        "create a Pod".into(),
        kube::create(&gvk("", "v1", "Pod"), ns, pod_json).map(drop),
    );
    record(
        "patch ConfigMap status".into(),
        kube::patch_status(&cm, ns, "x", &ObjectPatch::Merge("{}".into())).map(drop),
    );
    // Events: fields out of Kubernetes' bounds, and an object never granted.
    let event = |name: &str, reason: &str, note: String| Event {
        regarding_kind: cm.clone(),
        regarding_namespace: ns.map(str::to_string),
        regarding_name: name.into(),
        type_: EventType::Warning,
        reason: reason.into(),
        action: "Hostile".into(),
        note,
    };
    record(
        "event about x/../..".into(),
        kube::record_event(&event("x/../..", "Evil", "n".into())),
    );
    record(
        "event with a control character".into(),
        kube::record_event(&event("x", "Evil\u{7}", "n".into())),
    );
    record(
        "event with a 1 MiB note".into(),
        kube::record_event(&event("x", "Evil", "n".repeat(1 << 20))),
    );
    // Bodies past the host's 4 MiB payload ceiling (valid JSON, so only
    // their size can refuse them).
    let huge = |name: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"x":"{}"}}}}"#,
            "x".repeat(5 << 20)
        )
    };
    record(
        "create a 5 MiB ConfigMap".into(),
        kube::create(&cm, ns, &huge("huge")).map(drop),
    );
    record(
        "merge-patch with a 5 MiB body".into(),
        kube::patch(&cm, ns, "inject", &ObjectPatch::Merge(huge("inject"))).map(drop),
    );

    let escaped: Vec<String> = attempts
        .into_iter()
        .filter_map(|(what, r)| match r {
            Err(ApiError::Invalid(_)) | Err(ApiError::Forbidden(_)) => None,
            other => Some(format!("{what}: {other:?}")),
        })
        .collect();
    if escaped.is_empty() {
        wasmctrl_sdk::info!("every injection attempt was refused");
        Ok(Action::done())
    } else {
        Err(Error::permanent(format!(
            "not refused: {}",
            escaped.join("; ")
        )))
    }
}

wasmctrl_sdk::export_reconciler!(Hostile);

/// Whether the plugin's settings say `attack: true`: a shadow candidate
/// attacks while the stable version beside it reconciles normally.
fn attacks(ctx: &Context) -> bool {
    ctx.settings_json()
        .replace(' ', "")
        .contains(r#""attack":true"#)
}

/// Sends `patch` as a JSON patch of the ConfigMap `name`; the reconcile
/// fails with the host's answer when it is refused.
fn json_patch(ns: Option<&str>, name: &str, patch: &str) -> Result<Action, Error> {
    kube::patch(&configmaps(), ns, name, &ObjectPatch::Json(patch.into()))?;
    Ok(Action::done())
}

/// `/spec` becomes a chain of `{"a": …}` objects, and each of `doublings`
/// operations copies the chain into its own innermost object: the depth
/// goes 1, 3, 7, … 2^(doublings+1) - 1 while the patch stays small.
fn deep_patch(doublings: u32) -> String {
    let mut ops = vec![r#"{"op":"add","path":"/spec","value":{"a":{}}}"#.to_string()];
    let mut depth = 1usize;
    for _ in 0..doublings {
        let path = format!("/spec{}", "/a".repeat(depth + 1));
        ops.push(format!(r#"{{"op":"copy","from":"/spec","path":"{path}"}}"#));
        depth = 2 * depth + 1;
    }
    format!("[{}]", ops.join(","))
}

/// `/spec` holds 512 bytes, and each of `doublings` operations copies
/// `/spec` into a new member of itself, doubling it.
fn copies_patch(doublings: u32) -> String {
    let mut ops = vec![format!(
        r#"{{"op":"add","path":"/spec","value":{{"x":"{}"}}}}"#,
        "y".repeat(512)
    )];
    for i in 0..doublings {
        ops.push(format!(
            r#"{{"op":"copy","from":"/spec","path":"/spec/c{i}"}}"#
        ));
    }
    format!("[{}]", ops.join(","))
}

/// Bodies within the host's payload limit made of a million tiny values:
/// whatever the API server answers, the host must not have built them
/// into trees.
fn tiny_values(ns: Option<&str>, name: &str) -> Result<Action, Error> {
    let values = "0,".repeat(2_000_000);
    let object = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}-x"}},"data":[{values}0]}}"#
    );
    let patch = format!(r#"[{{"op":"add","path":"/spec","value":[{values}0]}}]"#);
    drop(values);
    for _ in 0..8 {
        let _ = kube::create(&configmaps(), ns, &object);
        let _ = kube::patch(&configmaps(), ns, name, &ObjectPatch::Json(patch.clone()));
    }
    Ok(Action::done())
}
