//! End to end: the wasmctrl manager against the embedded API server over
//! HTTP, with real plugin components, driven with kubectl and kube-rs as a
//! user would.

mod cache;
mod deploy;
mod faults;
mod hostile;
mod hostile_polyglot;
mod hotswap;
mod in_cluster;
mod load;
mod manager;
mod modules;
mod objects;
mod replay;
mod rollout;
mod webapp;
