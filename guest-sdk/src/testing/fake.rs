//! The fakes of the host's imports that `crate::host` uses natively: each
//! call is recorded and admitted (faults, permissions), then served from
//! the cluster's state.

pub(crate) mod context;
pub(crate) mod http;
pub(crate) mod kube;
pub(crate) mod secrets;
