//! opconform's providers: where a scenario's cluster comes from and how the fault
//! vocabulary is carried out there, behind one trait ([`cluster::Provider`]).
//!
//! - [`cluster`]: the `Provider` trait, its factory ([`cluster::open`]) and run hooks, and
//!   the four providers: sim, local, kubeconfig, kind.
//! - [`sim`]: the simulated cluster assembled from the simulator's crates (API server,
//!   controllers, kubelets), which know nothing of the harness.
//!
//! This is the only crate of the harness that uses the simulator's crates.

use std::path::{Path, PathBuf};

// The core, under the names the providers' modules use.
pub use opconform_core::{audit, check, deploy, error_chain, fault, record};

pub mod cluster;
pub mod sim;

/// The root of the repository the harness was built from: where `operator/`, `ci/` and
/// `kind-config.yaml` are.
pub fn repository_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    // crates/providers → the repository.
    manifest
        .ancestors()
        .nth(2)
        .unwrap_or(manifest)
        .to_path_buf()
}

/// Timelines (HTML + SVG) and the scenario index ([`opconform_core::report`]), and where
/// the harness keeps them.
pub mod report {
    pub use opconform_core::report::*;

    /// Where reports go. Run from inside the repository the harness was built from (its
    /// tests, `cargo run`): `$CARGO_TARGET_DIR/opconform` when the variable is set (a
    /// relative one is taken from the repository, as cargo does from where it runs), else
    /// the repository's `target/opconform`. Run from anywhere else (an installed
    /// `opconform` in an operator's project): `opconform/reports` in the current
    /// directory, beside the profile and features `opconform init` writes.
    pub fn reports_root() -> std::path::PathBuf {
        let repository = super::repository_root();
        match std::env::current_dir() {
            Ok(here) if !here.starts_with(&repository) => here.join("opconform/reports"),
            _ => reports_root_in(&repository),
        }
    }
}
