//! The host in a cluster: the wasmctrl manager, in this process, against
//! the embedded API server over HTTPS, with real plugin components, driven
//! with kubectl and kube-rs as a user would. The shared fixture (a
//! [`wasmctrl_cluster_tests::Cluster`]) is the crate's library; what every
//! suite shares is `wasmctrl_testkit`.

mod admission;
mod cache;
mod deploy;
mod dns;
mod faults;
mod hostile;
mod hostile_polyglot;
mod hotswap;
mod in_cluster;
mod load;
mod manager;
mod objects;
mod outbound;
mod replay;
mod rollout;
mod startup;
mod webapp;
