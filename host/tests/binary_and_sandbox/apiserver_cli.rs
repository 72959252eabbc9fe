//! `wasmctrl apiserver` as a user runs it: `--authorization rbac` makes
//! Roles and bindings decide, so a ServiceAccount with none is refused.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::Api;
use kube::api::{ListParams, PostParams};
use wasmctrl_testkit::client::config_for;
use wasmctrl_testkit::process::Process;

use crate::binary::wasmctrl;

/// A ServiceAccount's token from `wasmctrl apiserver --authorization MODE`
/// (created by the admin), and the admin's kube config.
async fn a_service_accounts_view(mode: &str) -> (Process, kube::Config, kube::Client) {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kc");
    let server = Process::spawn(
        wasmctrl()
            .args(["apiserver", "--authorization", mode, "--kubeconfig-out"])
            .arg(&kubeconfig),
    );
    // The kubeconfig is written once the server serves; the server says so
    // (or exits, ending its output).
    let lines = server
        .printed_until("kubeconfig written", Duration::from_secs(60))
        .await;
    assert!(
        lines[0].contains(&format!("(authorization: {mode})")),
        "{lines:?}"
    );
    let admin = config_for(&kubeconfig).await;
    let client = kube::Client::try_from(admin.clone()).unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(client, "default");
    let account: ServiceAccount = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody"}
    }))
    .unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let token = accounts
        .create_token_request(
            "nobody",
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec::default()),
                ..TokenRequest::default()
            },
        )
        .await
        .unwrap()
        .status
        .and_then(|s| s.token)
        .expect("a token");
    let mut as_account = admin.clone();
    as_account.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    let client = kube::Client::try_from(as_account).unwrap();
    (server, admin, client)
}

#[tokio::test]
async fn apiserver_with_rbac_refuses_an_account_without_a_binding() {
    let (_server, _, nobody) = a_service_accounts_view("rbac").await;
    let e = Api::<ConfigMap>::namespaced(nobody, "default")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    match e {
        kube::Error::Api(status) => assert_eq!(status.code, 403, "{status:?}"),
        e => panic!("{e}"),
    }
}

#[tokio::test]
async fn apiserver_without_rbac_allows_the_same_request() {
    let (_server, _, nobody) = a_service_accounts_view("always-allow").await;
    Api::<ConfigMap>::namespaced(nobody, "default")
        .list(&ListParams::default())
        .await
        .unwrap();
}
