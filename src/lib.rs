//! opconform: an end-to-end conformance harness for Kubernetes operators.
//!
//! Gherkin features state what an operator promises (one leader, the four reconcile
//! results, finalizers); the harness deploys the operator, injects faults, records a
//! history and checks it. By default it runs against [`sim`], an embedded simulated
//! control plane that needs nothing installed.
//!
//! Module map:
//! - [`sim`]: the simulated control plane (API server; knows nothing of the harness).
//! - [`audit`]: the audit record every provider gives, and its live feed.
//! - [`fault`]: the fault vocabulary the features speak; each provider carries it out.
//! - [`cluster`]: the providers a scenario runs on (sim, kubeconfig, kind) behind one trait.
//! - [`deploy`]: apply manifests through the API and wait for rollouts.
//! - [`record`]: the history of a scenario; [`check`]: the checkers over it.
//! - [`report`]: timelines (HTML + SVG) and the scenario index.
//! - [`subject`]: the operator under test (namespace, lock, manifests, binary), described once;
//!   [`profile`]: the YAML file that describes it.
//! - [`steps`]: the cucumber step library and the scenario [`steps::World`].
//! - [`bench`]: `opconform bench`, the operator's handoffs, API load and memory beside the anchors'.
//! - [`cli`]: the `opconform` command line.

pub mod audit;
pub mod bench;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod conformance;
pub mod deploy;
pub mod fault;
pub mod profile;
pub mod record;
pub mod report;
pub mod sim;
pub mod steps;
pub mod subject;

/// An error and its causes, outermost first, joined by `: ` — what a person needs to see
/// when an error is printed once at the top.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    std::iter::successors(Some(e), |e| e.source())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}
