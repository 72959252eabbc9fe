//! The kubeconfig kubectl, kube-rs and the Python client load to reach the
//! server: one cluster, user and context, all named `wasmctrl`.

use std::io::Write;
use std::path::Path;

/// Why a kubeconfig could not be written.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
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
pub fn render(server: &str, token: &str, ca_pem: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: wasmctrl\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: wasmctrl\n  user:\n    token: {}\ncontexts:\n- name: wasmctrl\n  context:\n    cluster: wasmctrl\n    user: wasmctrl\n    namespace: default\ncurrent-context: wasmctrl\npreferences: {{}}\n",
        q(server),
        q(&ca),
        q(token)
    )
}

/// Writes `contents` to `path` with mode 0600 (it holds the token), creating
/// parent directories. The file is created with the restrictive mode before
/// any byte is written, so the token is never world-readable.
pub fn write(path: &Path, contents: &str) -> Result<(), KubeconfigError> {
    let err = |source| KubeconfigError::Io {
        path: path.display().to_string(),
        source,
    };
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path).map_err(err)?;
    #[cfg(unix)]
    {
        // An existing file keeps its old mode through open(); force it.
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(err)?;
    }
    f.write_all(contents.as_bytes()).map_err(err)?;
    Ok(())
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
