//! An operator of StatefulSets and Jobs, the kinds whose controllers operators lean on
//! most: a `Store` becomes a StatefulSet with a volume claim per pod, a `Batch` a Job, and
//! each reports in its status what its workload's controller reports (readiness,
//! completion).
//!
//! Module map:
//! - [`crd`]: the `Store` and `Batch` custom resources (`workloads.example.com/v1alpha1`).
//! - [`store`], [`batch`]: their reconcilers, each with the objects it applies and the
//!   status it derives, as pure functions beside the reconcile.
//! - [`apply`]: what both share (server-side apply, the status write, the error).
//! - [`run`]: the process: flags, the client from the in-cluster configuration, both
//!   controllers until SIGTERM.
//!
//! The binary is thin: `main.rs` parses flags and calls [`run::main`].

pub mod apply;
pub mod batch;
pub mod crd;
pub mod run;
pub mod store;

/// What every reconcile is given.
#[derive(Clone)]
pub struct Context {
    /// The client, as the operator's ServiceAccount.
    pub client: kube::Client,
    /// The image the workloads' pods run (a busybox).
    pub image: String,
}
