//! kubectl 1.32 (the image's /usr/bin/kubectl dispatcher) run as a user
//! would, against the written kubeconfig.

use std::io::{BufRead, BufReader};
use std::process::{Output, Stdio};

use wasmctrl_testkit::kubectl::command as kubectl_command;

use crate::common::Harness;

/// kubectl with this server's kubeconfig and a private discovery cache.
fn kubectl(h: &Harness, args: &[&str]) -> Output {
    kubectl_stdin(h, args, None)
}

/// kubectl with `stdin` written to it (None: no input).
pub(crate) fn kubectl_stdin(h: &Harness, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = kubectl_command(&h.kubeconfig_path());
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("kubectl must be installed (.ci/run installs it): {e}"));
    if let Some(input) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

/// Runs kubectl off the async runtime's worker threads and asserts success.
async fn ok(h: &Harness, args: &[&str]) -> String {
    ok_stdin(h, args, None).await
}

async fn ok_stdin(h: &Harness, args: &[&str], stdin: Option<&str>) -> String {
    let out = tokio::task::block_in_place(|| kubectl_stdin(h, args, stdin));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

async fn fails(h: &Harness, args: &[&str]) -> String {
    let out = tokio::task::block_in_place(|| kubectl(h, args));
    assert!(
        !out.status.success(),
        "kubectl {args:?} unexpectedly succeeded"
    );
    String::from_utf8_lossy(&out.stderr).to_string()
}

const CM: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: c1
  labels:
    app: demo
data:
  a: "1"
"#;

const DEPLOY: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: app
        image: nginx:1
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_workflow() {
    let h = Harness::start().await;
    let v = ok(&h, &["version", "-o", "json"]).await;
    assert!(v.contains("\"minor\": \"32\""), "{v}");
    assert!(ok(&h, &["get", "ns"]).await.contains("kube-system"));
    assert_eq!(
        ok(&h, &["auth", "can-i", "create", "pods"]).await.trim(),
        "yes"
    );
    assert!(ok(&h, &["auth", "whoami"]).await.contains("wasmctrl-admin"));

    // create -f (with default strict validation) and get.
    ok_stdin(&h, &["create", "-f", "-"], Some(CM)).await;
    let got = ok(&h, &["get", "cm", "-l", "app=demo", "-o", "name"]).await;
    assert_eq!(got.trim(), "configmap/c1");
    let table = ok(&h, &["get", "cm", "c1"]).await;
    assert!(table.contains("DATA") && table.contains("AGE"), "{table}");
    let dup = tokio::task::block_in_place(|| kubectl_stdin(&h, &["create", "-f", "-"], Some(CM)));
    assert!(String::from_utf8_lossy(&dup.stderr).contains("AlreadyExists"));

    // Imperative creates send protobuf bodies.
    ok(&h, &["create", "configmap", "imp", "--from-literal=k=v"]).await;
    assert_eq!(
        ok(&h, &["get", "cm", "imp", "-o", "jsonpath={.data.k}"]).await,
        "v"
    );
    // A server dry-run delete (its dryRun in the DeleteOptions body)
    // deletes nothing.
    let said = ok(&h, &["delete", "cm", "imp", "--dry-run=server"]).await;
    assert!(said.contains("deleted (server dry run)"), "{said}");
    ok(&h, &["get", "cm", "imp"]).await;
    ok(
        &h,
        &["create", "secret", "generic", "sec", "--from-literal=p=s3"],
    )
    .await;
    assert_eq!(
        ok(&h, &["get", "secret", "sec", "-o", "jsonpath={.data.p}"]).await,
        "czM="
    );
    ok(
        &h,
        &[
            "create",
            "deployment",
            "imp",
            "--image=nginx:1",
            "--port=80",
            "--replicas=2",
        ],
    )
    .await;
    assert_eq!(
        ok(&h, &["get", "deploy", "imp", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].ports[0].containerPort}"]).await,
        "2 80"
    );
    ok(
        &h,
        &["create", "service", "clusterip", "imp", "--tcp=80:8080"],
    )
    .await;
    assert_eq!(
        ok(
            &h,
            &[
                "get",
                "svc",
                "imp",
                "-o",
                "jsonpath={.spec.ports[0].targetPort}"
            ]
        )
        .await,
        "8080"
    );
    ok(
        &h,
        &[
            "create",
            "job",
            "imp",
            "--image=busybox",
            "--",
            "echo",
            "hi",
        ],
    )
    .await;
    assert_eq!(
        ok(
            &h,
            &[
                "get",
                "job",
                "imp",
                "-o",
                "jsonpath={.spec.template.spec.containers[0].command}"
            ]
        )
        .await,
        r#"["echo","hi"]"#
    );
    ok(&h, &["create", "namespace", "team"]).await;
    ok(&h, &["create", "serviceaccount", "bot", "-n", "team"]).await;
    ok(&h, &["delete", "namespace", "team"]).await;

    // Client-side apply (strategic merge patch for built-ins).
    ok_stdin(&h, &["apply", "-f", "-"], Some(DEPLOY)).await;
    let changed = DEPLOY.replace("nginx:1", "nginx:2");
    // diff sends dryRun=All and must not change anything.
    let diff =
        tokio::task::block_in_place(|| kubectl_stdin(&h, &["diff", "-f", "-"], Some(&changed)));
    assert_eq!(
        diff.status.code(),
        Some(1),
        "diff finds a change: {}",
        String::from_utf8_lossy(&diff.stderr)
    );
    assert!(String::from_utf8_lossy(&diff.stdout).contains("nginx:2"));
    let img = ok(
        &h,
        &[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ],
    )
    .await;
    assert_eq!(img, "nginx:1", "diff stored nothing");
    ok_stdin(&h, &["apply", "-f", "-"], Some(&changed)).await;
    let img = ok(
        &h,
        &[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ],
    )
    .await;
    assert_eq!(img, "nginx:2");

    // Server-side apply, with a conflict against another manager.
    let ssa = CM.replace("name: c1", "name: c2");
    ok_stdin(&h, &["apply", "--server-side", "-f", "-"], Some(&ssa)).await;
    let other = ssa.replace("a: \"1\"", "a: \"2\"");
    let conflict = tokio::task::block_in_place(|| {
        kubectl_stdin(
            &h,
            &[
                "apply",
                "--server-side",
                "--field-manager",
                "other",
                "-f",
                "-",
            ],
            Some(&other),
        )
    });
    assert!(!conflict.status.success());
    assert!(
        String::from_utf8_lossy(&conflict.stderr).contains("conflict"),
        "{}",
        String::from_utf8_lossy(&conflict.stderr)
    );
    ok_stdin(
        &h,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            "other",
            "-f",
            "-",
        ],
        Some(&other),
    )
    .await;
    assert_eq!(
        ok(&h, &["get", "cm", "c2", "-o", "jsonpath={.data.a}"]).await,
        "2"
    );

    // The three patch types, label, describe.
    ok(&h, &["patch", "cm", "c1", "-p", r#"{"data":{"s":"x"}}"#]).await;
    ok(
        &h,
        &[
            "patch",
            "cm",
            "c1",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"m":"y"}}"#,
        ],
    )
    .await;
    ok(
        &h,
        &[
            "patch",
            "cm",
            "c1",
            "--type",
            "json",
            "-p",
            r#"[{"op":"remove","path":"/data/s"}]"#,
        ],
    )
    .await;
    ok(&h, &["label", "cm", "c1", "extra=yes"]).await;
    let data = ok(&h, &["get", "cm", "c1", "-o", "jsonpath={.data}"]).await;
    assert!(
        data.contains("\"m\":\"y\"") && !data.contains("\"s\""),
        "{data}"
    );
    let described = ok(&h, &["describe", "cm", "c1"]).await;
    assert!(described.contains("extra=yes"), "{described}");
    let described = ok(&h, &["describe", "deploy", "web"]).await;
    assert!(described.contains("nginx:2"), "{described}");

    // get -w, bounded: the watch prints the current object, then a change.
    let mut child = kubectl_command(&h.kubeconfig_path())
        .args([
            "get",
            "cm",
            "c1",
            "-w",
            "-o",
            "jsonpath={.data.m}{\"\\n\"}",
            "--request-timeout=20s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = tokio::task::block_in_place(|| rx.recv_timeout(std::time::Duration::from_secs(20)))
        .unwrap();
    assert_eq!(first, "y");
    ok(
        &h,
        &[
            "patch",
            "cm",
            "c1",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"m":"z"}}"#,
        ],
    )
    .await;
    let second =
        tokio::task::block_in_place(|| rx.recv_timeout(std::time::Duration::from_secs(20)))
            .unwrap();
    assert_eq!(second, "z");
    let _ = child.kill();
    let _ = child.wait();

    // delete + wait --for=delete on an object held by a finalizer.
    ok(
        &h,
        &[
            "patch",
            "cm",
            "c1",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
        ],
    )
    .await;
    ok(&h, &["delete", "cm", "c1", "--wait=false"]).await;
    let wait = {
        let kc = h.kubeconfig_path();
        std::thread::spawn(move || {
            kubectl_command(&kc)
                .args(["wait", "--for=delete", "cm/c1", "--timeout=30s"])
                .output()
                .unwrap()
        })
    };
    ok(
        &h,
        &[
            "patch",
            "cm",
            "c1",
            "--type",
            "json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
    )
    .await;
    let out = tokio::task::block_in_place(|| wait.join().unwrap());
    assert!(
        out.status.success(),
        "wait --for=delete: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ok(&h, &["delete", "deploy", "web"]).await;
    assert_eq!(
        ok(&h, &["get", "deploy", "-o", "name"]).await.trim(),
        "deployment.apps/imp"
    );
}

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, shortNames: [gd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_crd_established_and_custom_resources() {
    let h = Harness::start().await;
    ok_stdin(&h, &["apply", "-f", "-"], Some(CRD)).await;
    ok(
        &h,
        &[
            "wait",
            "--for",
            "condition=established",
            "crd/gadgets.example.com",
            "--timeout=30s",
        ],
    )
    .await;
    let cr = "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g1\nspec:\n  size: 1\n";
    ok_stdin(&h, &["apply", "-f", "-"], Some(cr)).await;
    // Unknown fields: rejected under the default strict validation,
    // pruned with a warning under --validate=warn.
    let bogus = "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g2\nspec:\n  size: 1\n  bogus: 2\n";
    let strict =
        tokio::task::block_in_place(|| kubectl_stdin(&h, &["apply", "-f", "-"], Some(bogus)));
    assert!(!strict.status.success());
    assert!(String::from_utf8_lossy(&strict.stderr).contains("unknown field \"spec.bogus\""));
    let warned = tokio::task::block_in_place(|| {
        kubectl_stdin(&h, &["apply", "--validate=warn", "-f", "-"], Some(bogus))
    });
    assert!(warned.status.success());
    assert!(
        String::from_utf8_lossy(&warned.stderr).contains("Warning: unknown field \"spec.bogus\"")
    );
    // Client-side apply of a CR uses a merge patch.
    ok_stdin(
        &h,
        &["apply", "-f", "-"],
        Some(&cr.replace("size: 1", "size: 2")),
    )
    .await;
    assert_eq!(
        ok(&h, &["get", "gd", "g1", "-o", "jsonpath={.spec.size}"]).await,
        "2"
    );
    // Human-readable output is a server-side Table with the printer columns.
    let table = ok(&h, &["get", "gadgets"]).await;
    assert!(
        table.starts_with("NAME") && table.contains("SIZE") && table.contains("g1"),
        "{table}"
    );
    let err = fails(
        &h,
        &[
            "patch",
            "gadget",
            "g1",
            "--type",
            "strategic",
            "-p",
            r#"{"spec":{"size":3}}"#,
        ],
    )
    .await;
    assert!(
        err.contains("unknown format")
            || err.contains("415")
            || err.contains("UnsupportedMediaType"),
        "{err}"
    );
    ok(&h, &["delete", "crd", "gadgets.example.com"]).await;
    let out = tokio::task::block_in_place(|| kubectl(&h, &["get", "gadgets"]));
    assert!(!out.status.success(), "gadgets no longer served");
}

const LISTENER_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: listeners.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: listeners, singular: listener, kind: Listener}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              tags:
                type: array
                x-kubernetes-list-type: set
                items: {type: string}
              ports:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [port, protocol]
                items:
                  type: object
                  required: [port]
                  properties:
                    port: {type: integer}
                    protocol: {type: string, default: TCP}
                    name: {type: string}
"#;

fn listener(ports: &str, tags: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Listener\nmetadata:\n  name: edge\nspec:\n  ports: {ports}\n  tags: {tags}\n"
    )
}

/// Two managers applying different items of a custom resource's keyed
/// list each keep theirs, as the CRD's `x-kubernetes-list-type` says; a
/// CRD whose list types are malformed is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_merges_a_custom_resources_lists_by_its_schema() {
    let h = Harness::start().await;
    let keyless = LISTENER_CRD.replace("x-kubernetes-list-map-keys: [port, protocol]", "");
    let refused =
        tokio::task::block_in_place(|| kubectl_stdin(&h, &["apply", "-f", "-"], Some(&keyless)));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[ports].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
        ),
        "{stderr}"
    );
    ok_stdin(&h, &["apply", "-f", "-"], Some(LISTENER_CRD)).await;
    ok(
        &h,
        &[
            "wait",
            "--for",
            "condition=established",
            "crd/listeners.example.com",
            "--timeout=30s",
        ],
    )
    .await;

    let apply = |manager: &'static str, body: String| {
        let h = &h;
        async move {
            tokio::task::block_in_place(|| {
                kubectl_stdin(
                    h,
                    &[
                        "apply",
                        "--server-side",
                        "--field-manager",
                        manager,
                        "-f",
                        "-",
                    ],
                    Some(&body),
                )
            })
        }
    };
    let ports_and_tags = || {
        ok(
            &h,
            &[
                "get",
                "listener",
                "edge",
                "-o",
                "jsonpath={.spec.ports[*].name} {.spec.tags}",
            ],
        )
    };
    let http = apply("http", listener("[{port: 80, name: http}]", "[web]")).await;
    assert!(http.status.success(), "{http:?}");
    let tls = apply("tls", listener("[{port: 443, name: https}]", "[tls]")).await;
    assert!(tls.status.success(), "{tls:?}");
    assert_eq!(ports_and_tags().await, r#"http https ["web","tls"]"#);

    // Renaming the other manager's port conflicts on that item alone.
    let taken = apply("tls", listener("[{port: 80, name: web}]", "[tls]")).await;
    let stderr = String::from_utf8_lossy(&taken.stderr);
    assert!(!taken.status.success(), "{stderr}");
    assert!(
        stderr.contains(r#"conflict with "http": .spec.ports[port=80,protocol="TCP"].name"#),
        "{stderr}"
    );

    // A manager that drops its item removes only that item.
    let dropped = apply("tls", listener("[]", "[]")).await;
    assert!(dropped.status.success(), "{dropped:?}");
    assert_eq!(ports_and_tags().await, r#"http ["web"]"#);
}

/// The usual way out of a namespace its contents hold in Terminating
/// works as on a cluster: its JSON, `spec.finalizers` emptied, put back
/// through `kubectl replace --raw .../finalize`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_replace_raw_finalize_lets_a_stuck_namespace_go() {
    let h = Harness::start().await;
    ok(&h, &["create", "namespace", "stuck"]).await;
    let held = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers: [example.com/hold]\n";
    ok_stdin(&h, &["apply", "-n", "stuck", "-f", "-"], Some(held)).await;
    ok(&h, &["delete", "namespace", "stuck", "--wait=false"]).await;
    let phase = ok(
        &h,
        &["get", "ns", "stuck", "-o", "jsonpath={.status.phase}"],
    )
    .await;
    assert_eq!(phase, "Terminating");
    let again = fails(&h, &["delete", "namespace", "stuck", "--wait=false"]).await;
    assert!(
        again.contains("Error from server (Conflict): Operation cannot be fulfilled on namespaces \"stuck\": The system is ensuring all content is removed from this namespace."),
        "{again}"
    );
    let mut ns: serde_json::Value =
        serde_json::from_str(&ok(&h, &["get", "ns", "stuck", "-o", "json"]).await).unwrap();
    ns["spec"]["finalizers"] = serde_json::json!([]);
    let path = "/api/v1/namespaces/stuck/finalize";
    let put = ok_stdin(
        &h,
        &["replace", "--raw", path, "-f", "-"],
        Some(&ns.to_string()),
    )
    .await;
    assert!(put.contains("\"name\":\"stuck\""), "{put}");
    let gone = fails(&h, &["get", "ns", "stuck"]).await;
    assert!(gone.contains("namespaces \"stuck\" not found"), "{gone}");
}
