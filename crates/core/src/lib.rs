//! opconform's core: what a scenario is made of, whatever cluster it runs on. It knows no
//! provider; the providers carry its fault vocabulary out and feed its recorder.
//!
//! - [`fault`]: the fault vocabulary the features speak, the request rules a provider may
//!   judge, and the scenario's fault log.
//! - [`audit`]: the audit record every provider gives, and its live feed.
//! - [`record`]: the history of a scenario and the recorder that writes it.
//! - [`check`]: the checkers over a history (single leader, single writer, failover, …).
//! - [`report`]: timelines (HTML + SVG) and the scenario index.
//! - [`deploy`]: apply manifests through the API and wait for rollouts.

pub mod audit;
pub mod check;
pub mod deploy;
pub mod fault;
pub mod record;
pub mod report;

/// An error and its causes, outermost first, joined by `: ` — what a person needs to see
/// when an error is printed once at the top.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    std::iter::successors(Some(e), |e| e.source())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}
