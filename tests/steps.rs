//! The step library driven from Rust, as an operator author's own tests call it: a
//! [`World`] on the simulator with the bundled operator deployed through it.

use std::time::{Duration, Instant};

use opconform::steps::diagnosis::{explained, operator_pods};
use opconform::steps::operator::deploy;
use opconform::steps::{StepError, World};
use opconform::subject::OperatorSetup;

/// How long the operator's pods get to exit (each exits as soon as it parses its flags).
const EXITED_WITHIN: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_an_operator_whose_every_pod_exits_names_each_pod_its_exit_and_its_last_log_line()
{
    let mut world = World::default();
    world.scenario = "a wait on an operator whose every pod exits".into();
    world
        .start_cluster()
        .await
        .expect("the simulated cluster starts");
    // client-go's rule, which the operator keeps: the lease must outlast the renew deadline.
    let setup = OperatorSetup::lease(world.subject(), 2, "3s/3s/1s", "").expect("lease mode");
    deploy(&mut world, setup)
        .await
        .expect("the operator's manifests apply");
    let why = "--lease-duration (3s) must be greater than --renew-deadline (3s)";
    let begin = Instant::now();
    let pods = loop {
        let pods = operator_pods(&world).await;
        let exited = pods.matches("manager last exited with code").count();
        if exited == 2 && pods.matches(why).count() == 2 {
            break pods;
        }
        assert!(
            begin.elapsed() < EXITED_WITHIN,
            "both pods exited within {EXITED_WITHIN:?}, with {why:?} in their logs; the last \
             diagnosis: {pods}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let waited = StepError::NotWithin {
        within: Duration::from_secs(1),
        what: "a single leader".into(),
        last: "no lease".into(),
    };
    let failure = explained(&world, waited).await.to_string();
    world.finish(false).await;
    assert!(
        failure.starts_with("expected within 1s: a single leader; last observed: no lease\n"),
        "{failure}"
    );
    assert!(
        failure.contains("the operator's pods in memcached-operator-system:"),
        "{failure}"
    );
    assert_eq!(failure.matches(why).count(), 2, "{failure}");
    assert!(pods.contains("restart"), "{pods}");
}
