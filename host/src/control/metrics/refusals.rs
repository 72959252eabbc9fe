//! The process-wide refusal counters: what network sources refused
//! (`wasmctrl_source_refusals_total`) and what the host refused to read
//! back from its own disk (`wasmctrl_disk_refusals_total`).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::labels::{ReasonLabel, WhatLabel};

/// What a network source refused: the `reason` of
/// `wasmctrl_source_refusals_total`, from this fixed set (never a string a
/// server or an object chose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceRefusal {
    /// A connection to an address a WasmReconciler's source may not reach
    /// (named literally, resolved to, or redirected to).
    InternalAddress,
    /// A redirect to a scheme the source may not use, or one too many.
    Redirect,
    /// A registry's token answer over its bound.
    TokenAnswer,
    /// A manifest over its bound.
    Manifest,
    /// A component over the source's `maxSize`.
    Component,
    /// An error answer (a registry's, its token endpoint's) read only to
    /// its bound, the rest left unread.
    ErrorAnswer,
    /// A manifest refused for what it says: not a wasm OCI artifact's (its
    /// JSON, shape, media types or digests), or a component layer larger
    /// than the source's `maxSize`.
    NotAnArtifact,
    /// A WasmReconciler object's load refused because the loads under way
    /// hold `pluginsFrom.maxLoadingBytes` of components already.
    LoadingBytes,
}

impl SourceRefusal {
    const ALL: [SourceRefusal; 8] = [
        SourceRefusal::InternalAddress,
        SourceRefusal::Redirect,
        SourceRefusal::TokenAnswer,
        SourceRefusal::Manifest,
        SourceRefusal::Component,
        SourceRefusal::ErrorAnswer,
        SourceRefusal::NotAnArtifact,
        SourceRefusal::LoadingBytes,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SourceRefusal::InternalAddress => "internalAddress",
            SourceRefusal::Redirect => "redirect",
            SourceRefusal::TokenAnswer => "tokenAnswer",
            SourceRefusal::Manifest => "manifest",
            SourceRefusal::Component => "component",
            SourceRefusal::ErrorAnswer => "errorAnswer",
            SourceRefusal::NotAnArtifact => "notAnArtifact",
            SourceRefusal::LoadingBytes => "loadingBytes",
        }
    }
}

/// `wasmctrl_source_refusals_total`. Sources are built far from the host's
/// [`Metrics`] (from a config, a CLI command, a reload) and hold no handle
/// to it, so the family is process-wide: every registry registers the same
/// counters, which count every source of the process. Every reason is
/// there from the start, at 0.
///
/// [`Metrics`]: crate::control::metrics::Metrics
pub(super) static SOURCE_REFUSALS: std::sync::LazyLock<Family<ReasonLabel, Counter>> =
    std::sync::LazyLock::new(|| {
        let family = Family::<ReasonLabel, Counter>::default();
        for reason in SourceRefusal::ALL {
            let _ = family.get_or_create(&ReasonLabel {
                reason: reason.as_str().into(),
            });
        }
        family
    });

/// Counts a source's refusal in `wasmctrl_source_refusals_total`.
pub fn count_source_refusal(reason: SourceRefusal) {
    SOURCE_REFUSALS
        .get_or_create(&ReasonLabel {
            reason: reason.as_str().into(),
        })
        .inc();
}

/// How many times `reason` was counted in this process (for tests).
pub fn source_refusals(reason: SourceRefusal) -> u64 {
    SOURCE_REFUSALS
        .get_or_create(&ReasonLabel {
            reason: reason.as_str().into(),
        })
        .get()
}

/// What the host refused to believe when it read it back from its own
/// disk: the `what` of `wasmctrl_disk_refusals_total`, from this fixed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DiskRefusal {
    /// A precompiled artifact whose MAC, engine or shape did not check out
    /// (recompiled instead).
    CompiledArtifact,
    /// A compiled function kept on disk whose MAC or shape did not check
    /// out, or a directory of them others could write (compiled instead).
    CompiledFunction,
    /// A cached component over its `maxSize` or not matching its digest.
    CachedComponent,
    /// A cached reference record over 64 KiB or not well-formed.
    CachedRecord,
    /// A docker `config.json` over 1 MiB.
    DockerConfig,
    /// A file source that is not a regular file (a device, a FIFO) or is
    /// over 256 MiB.
    ComponentFile,
}

impl DiskRefusal {
    const ALL: [DiskRefusal; 6] = [
        DiskRefusal::CompiledArtifact,
        DiskRefusal::CompiledFunction,
        DiskRefusal::CachedComponent,
        DiskRefusal::CachedRecord,
        DiskRefusal::DockerConfig,
        DiskRefusal::ComponentFile,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DiskRefusal::CompiledArtifact => "compiledArtifact",
            DiskRefusal::CompiledFunction => "compiledFunction",
            DiskRefusal::CachedComponent => "cachedComponent",
            DiskRefusal::CachedRecord => "cachedRecord",
            DiskRefusal::DockerConfig => "dockerConfig",
            DiskRefusal::ComponentFile => "componentFile",
        }
    }
}

/// `wasmctrl_disk_refusals_total`: process-wide for the reason
/// [`SOURCE_REFUSALS`] is (the caches and credential files are read far
/// from the host's [`Metrics`]).
///
/// [`Metrics`]: crate::control::metrics::Metrics
pub(super) static DISK_REFUSALS: std::sync::LazyLock<Family<WhatLabel, Counter>> =
    std::sync::LazyLock::new(|| {
        let family = Family::<WhatLabel, Counter>::default();
        for what in DiskRefusal::ALL {
            let _ = family.get_or_create(&WhatLabel {
                what: what.as_str().into(),
            });
        }
        family
    });

/// Counts what the host refused to read back from its disk.
pub fn count_disk_refusal(what: DiskRefusal) {
    DISK_REFUSALS
        .get_or_create(&WhatLabel {
            what: what.as_str().into(),
        })
        .inc();
}

/// How many times `what` was refused in this process (for tests).
pub fn disk_refusals(what: DiskRefusal) -> u64 {
    DISK_REFUSALS
        .get_or_create(&WhatLabel {
            what: what.as_str().into(),
        })
        .get()
}
