//! An operator author's suite: the features in `features/`, run with opconform's step
//! library and World, plus a step of this crate's own. `cargo test --test conformance`
//! runs it on the simulator (`OPCONFORM_PROVIDER` and `OPCONFORM_OPERATOR` choose another provider and
//! the operator's profile, as for opconform's own suite).
//!
//! A step written here joins opconform's: cucumber collects every step of the `World` type
//! linked into the test binary, whichever crate defines it.

use cucumber::then;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use opconform::features::FeatureSet;
use opconform::steps::wait::eventually;
use opconform::steps::{Dur, Step, Suite, World, run_suite};

/// A step of this crate: the images the containers of a Deployment in the scenario's
/// `default` namespace run, waited for with the step's own bound.
#[then(expr = "within {duration} the Deployment {string} runs the image {string}")]
async fn deployment_runs_image(
    world: &mut World,
    within: Dur,
    name: String,
    image: String,
) -> Step {
    let namespace = world.namespace("default")?;
    let deployments: Api<Deployment> = Api::namespaced(world.client()?, &namespace);
    let what = format!("Deployment {name} runs {image}");
    eventually(world.span(&within)?, &what, || async {
        let deployment = deployments
            .get_opt(&name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("Deployment {name} does not exist"))?;
        let images: Vec<String> = deployment
            .spec
            .and_then(|s| s.template.spec)
            .map(|s| s.containers.into_iter().filter_map(|c| c.image).collect())
            .unwrap_or_default();
        if images.contains(&image) {
            Ok(())
        } else {
            Err(format!("its images: {images:?}"))
        }
    })
    .await?;
    Ok(())
}

#[tokio::main]
async fn main() {
    let mut suite = Suite::from_env().unwrap_or_else(|e| {
        eprintln!("{}", opconform::error_chain(&e));
        std::process::exit(2);
    });
    // Beside opconform's own reports, not over them.
    suite.reports = suite.reports.join("custom-steps");
    let features = FeatureSet::new()
        .path(concat!(env!("CARGO_MANIFEST_DIR"), "/features"))
        .unwrap_or_else(|e| {
            eprintln!("{}", opconform::error_chain(&e));
            std::process::exit(2);
        });
    if run_suite(features, suite, None).await.failed {
        std::process::exit(1);
    }
}
