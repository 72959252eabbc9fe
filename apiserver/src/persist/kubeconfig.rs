//! The kubeconfig kubectl, kube-rs and the Python client load to reach the
//! server: one cluster, user and context, all named `wasmctrl`.

use std::path::Path;

/// Why a kubeconfig could not be written.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// The file could not be written.
    #[error("creating {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Quotes a YAML scalar (double-quoted style, escaping `\` and `"`).
fn q(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Kubeconfig YAML for `server` with a bearer `token`, trusting the CA in
/// `ca_pem`.
pub(crate) fn render(server: &str, token: &str, ca_pem: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: wasmctrl\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: wasmctrl\n  user:\n    token: {}\ncontexts:\n- name: wasmctrl\n  context:\n    cluster: wasmctrl\n    user: wasmctrl\n    namespace: default\ncurrent-context: wasmctrl\npreferences: {{}}\n",
        q(server),
        q(&ca),
        q(token)
    )
}

/// Writes `contents` to `path` atomically with mode 0600 (it holds the
/// token), creating parent directories: a reader (a process waiting for the
/// file to appear) never sees a partial kubeconfig.
pub(crate) fn write(path: &Path, contents: &str) -> Result<(), KubeconfigError> {
    super::files::write_private(path, contents.as_bytes()).map_err(|source| KubeconfigError::Io {
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_parseable_yaml() {
        let y = render("https://127.0.0.1:1234", "tok\"en", "PEM");
        let v: serde_json::Value = serde_norway::from_str(&y).unwrap();
        assert_eq!(
            v["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:1234"
        );
        assert_eq!(
            v["clusters"][0]["cluster"]["certificate-authority-data"],
            "UEVN"
        );
        assert_eq!(v["users"][0]["user"]["token"], "tok\"en");
        assert_eq!(v["current-context"], "wasmctrl");
    }
}
