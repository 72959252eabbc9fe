//! The plugin's versions as installed, and a copy of one under a digest no
//! cache has seen.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;

/// One version of the plugin as installed.
#[derive(Clone)]
pub(super) struct Version {
    pub(super) bytes: Arc<Vec<u8>>,
    pub(super) digest: String,
    pub(super) stamp: &'static str,
}

impl Version {
    pub(super) fn read(path: &str, stamp: &'static str) -> anyhow::Result<Self> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
        Ok(Self::from_bytes(bytes, stamp))
    }

    fn from_bytes(bytes: Vec<u8>, stamp: &'static str) -> Self {
        Self {
            digest: wasmctrl::sandbox::digest(&bytes),
            bytes: Arc::new(bytes),
            stamp,
        }
    }

    /// The same code with a custom section appended: a digest no cache has
    /// seen.
    pub(super) fn fresh_copy(&self) -> Self {
        let name = b"wasmctrl-bench-cold";
        let nonce = format!(
            "{:?}",
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)
        );
        let mut body = Vec::new();
        leb128(&mut body, name.len());
        body.extend_from_slice(name);
        body.extend_from_slice(nonce.as_bytes());
        let mut bytes = (*self.bytes).clone();
        bytes.push(0); // custom section id
        leb128(&mut bytes, body.len());
        bytes.extend_from_slice(&body);
        Self::from_bytes(bytes, self.stamp)
    }

    /// Writes the component aside, then renames it over `to`, as a deploy
    /// tool would.
    pub(super) fn install(&self, to: &Path) -> anyhow::Result<()> {
        let tmp = to.with_extension("partial");
        std::fs::write(&tmp, &*self.bytes)?;
        std::fs::rename(&tmp, to)?;
        Ok(())
    }
}

fn leb128(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmctrl_plugin_artifacts as artifacts;

    #[test]
    fn a_custom_section_changes_the_digest_and_keeps_a_valid_component() {
        let v1 = Version::read(artifacts::STAMP_V1, "v1").unwrap();
        let fresh = v1.fresh_copy();
        assert_ne!(v1.digest, fresh.digest);
        assert_eq!(fresh.bytes[..v1.bytes.len()], v1.bytes[..]);
        let engine = wasmtime::Engine::default();
        wasmtime::component::Component::new(&engine, &*fresh.bytes).unwrap();
    }

    #[test]
    fn leb128_encodes_unsigned() {
        let enc = |n| {
            let mut v = Vec::new();
            leb128(&mut v, n);
            v
        };
        assert_eq!(enc(0), [0]);
        assert_eq!(enc(127), [127]);
        assert_eq!(enc(128), [0x80, 1]);
        assert_eq!(enc(624_485), [0xe5, 0x8e, 0x26]);
    }
}
