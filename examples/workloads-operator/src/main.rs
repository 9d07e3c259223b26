//! workloads-operator binary: parses flags and hands over to the library.
use clap::Parser as _;

fn main() -> std::process::ExitCode {
    workloads_operator::run::main(workloads_operator::run::Args::parse())
}
