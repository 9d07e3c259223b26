//! Steps that inject faults into the leader (or any pod) and undo them.

use cucumber::when;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};

use super::{Dur, World};
use crate::sim::faults::{Cut, PodFault};

fn leader(world: &World) -> String {
    world
        .leader
        .clone()
        .expect("a step saw a leader before this fault")
}

async fn pod_fault(world: &World, pod: &str, fault: PodFault) {
    let namespace = world.operator_namespace().expect("cluster");
    world
        .provider()
        .expect("cluster")
        .pod_fault(&namespace, pod, &fault)
        .await
        .unwrap_or_else(|e| panic!("{} on pod {pod} failed: {}", fault.verb(), super::chain(&e)));
}

/// Deletes the leader's Pod with `params`, recording the deletion as a fault first.
async fn delete_leader(world: &World, params: DeleteParams, detail: &str) {
    let pod = leader(world);
    let namespace = world.operator_namespace().expect("cluster");
    let pods: Api<Pod> = Api::namespaced(world.client().expect("cluster"), &namespace);
    world.provider().expect("cluster").faults().record(
        "delete",
        &format!("pod {namespace}/{pod}"),
        detail,
    );
    pods.delete(&pod, &params)
        .await
        .unwrap_or_else(|e| panic!("deleting {pod} ({detail}) failed: {e}"));
}

#[when("the leader pod is force deleted")]
async fn force_delete(world: &mut World) {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    delete_leader(world, params, "force, grace 0").await;
}

#[when("the leader pod is deleted")]
async fn delete(world: &mut World) {
    delete_leader(world, DeleteParams::default(), "graceful").await;
}

#[when(expr = "the leader is frozen for {duration}")]
async fn frozen_for(world: &mut World, span: Dur) {
    let pod = leader(world);
    pod_fault(world, &pod, PodFault::Hold).await;
    // The step's meaning is "for this long": the one place a plain sleep belongs.
    tokio::time::sleep(span.0).await;
    pod_fault(world, &pod, PodFault::Release).await;
}

#[when("the leader's container crashes")]
async fn crashes(world: &mut World) {
    let pod = leader(world);
    pod_fault(world, &pod, PodFault::Crash { container: None }).await;
}

#[when(expr = "the leader is cut off from the API server for {duration}")]
async fn cut_off_for(world: &mut World, span: Dur) {
    let pod = leader(world);
    pod_fault(world, &pod, PodFault::Partition { cut: Cut::Drop }).await;
    tokio::time::sleep(span.0).await;
    pod_fault(world, &pod, PodFault::Repair).await;
}
