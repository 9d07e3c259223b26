//! memcached-operator binary: parses flags and hands over to the library.
use clap::Parser;

fn main() -> std::process::ExitCode {
    memcached_operator::run::main(memcached_operator::cli::Args::parse())
}
