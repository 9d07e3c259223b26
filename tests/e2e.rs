//! The conformance suite: the Gherkin features in `features/`, run with the step library.

#[tokio::main]
async fn main() {
    opconform::steps::run(concat!(env!("CARGO_MANIFEST_DIR"), "/features")).await;
}
