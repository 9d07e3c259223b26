//! The memcached operator bundled with opconform: a Memcached reconciler with leader-for-life or lease election.
//!
//! Module map:
//! - [`crd`]: the `Memcached` custom resource (`cache.example.com/v1alpha1`).
//! - [`controller`]: reconcile (Deployment, status, registry ConfigMap, finalizer) and its four results.
//! - [`leader`]: election — [`leader::for_life`] and [`leader::lease`] — plus the write guard and healthz.
//! - [`cli`]: flags and their validation; [`run`]: the process (election, controller, HTTP, signals).
//! - [`metrics`], [`events`], [`http`], [`backoff`], [`clock`], [`shutdown`]: the supporting pieces.
//!
//! The binary is thin: `main.rs` parses flags and calls [`run::main`].

pub mod backoff;
pub mod cli;
pub mod clock;
pub mod controller;
pub mod crd;
pub mod events;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod run;
pub mod shutdown;

/// The Memcached CRD as YAML, as committed in `config/crd/cache.example.com_memcacheds.yaml`.
///
/// # Errors
/// Only if serialization fails (it does not for this type).
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    use kube::CustomResourceExt;
    serde_yaml::to_string(&crd::Memcached::crd())
}
