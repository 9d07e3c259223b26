//! The `opconform` binary: parses the command line and hands over to the library.

use clap::Parser as _;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = opconform::cli::Cli::parse();
    // The harness's own logs (watch retries, a control plane's readiness polls): warnings
    // by default, except while features run, whose report says what happened (RUST_LOG
    // shows them there too, as under `cargo test --test e2e`).
    let quiet = matches!(cli.command, opconform::cli::Command::Test(_));
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(if quiet { "off" } else { "warn" })
            }),
        )
        .with_writer(std::io::stderr)
        .init();
    match opconform::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", opconform::error_chain(&e));
            std::process::ExitCode::from(1)
        }
    }
}
