//! opconform's step library: the cucumber [`steps::World`] of a scenario, the steps grouped
//! by domain, and the runner ([`steps::run_suite`]); the operator under test
//! ([`subject::Subject`]) and the profile that describes it ([`profile`]).
//!
//! The steps reach a cluster only through the providers' trait, factory and run hooks
//! (`opconform-providers`' `cluster`), never a provider's own module.

// The core and the providers, under the names the steps use.
pub use opconform_core::{audit, check, deploy, error_chain, fault, record};
pub use opconform_providers::{cluster, report, repository_root};

pub mod features;
pub mod partial;
pub mod profile;
pub mod steps;
pub mod subject;
