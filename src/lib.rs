//! opconform: an end-to-end conformance harness for Kubernetes operators.
//!
//! Gherkin features state what an operator promises (one leader, the four reconcile
//! results, finalizers); the harness deploys the operator, injects faults, records a
//! history and checks it. By default it runs against [`sim`], an embedded simulated
//! control plane that needs nothing installed.
//!
//! Module map:
//! - [`sim`]: the simulated control plane (API server; knows nothing of the harness).
//! - [`audit`], [`fault`], [`record`], [`check`], [`report`], [`deploy`]: the core
//!   (`opconform-core`), re-exported: the audit record, the fault vocabulary, the history
//!   and its recorder, the checkers, the reports, applying manifests. It knows no provider.
//! - [`cluster`]: the providers a scenario runs on (sim, local, kubeconfig, kind) behind one
//!   trait, the factory that opens them and the run hooks.
//! - [`subject`]: the operator under test (namespace, lock, manifests, binary), described once;
//!   [`profile`]: the YAML file that describes it.
//! - [`steps`]: the cucumber step library and the scenario [`steps::World`].
//! - [`features`]: the features `opconform test` runs: the shipped ones, embedded, and the
//!   user's own.
//! - [`conformance`]: `opconform conformance`, the table of which guarantee each profile keeps.
//! - [`bench`]: `opconform bench`, the operator's handoffs, API load and memory beside the anchors'.
//! - [`init`]: `opconform init`, a profile and a starter feature read from a kubebuilder or
//!   operator-sdk project.
//! - [`cli`]: the `opconform` command line.

pub mod bench;
pub mod cli;
pub mod conformance;
pub mod features;
pub mod init;

pub use opconform_providers::{cluster, report, repository_root, sim};
pub use opconform_steps::{profile, steps, subject};

pub use opconform_core::{audit, check, deploy, error_chain, fault, record};
