//! Integration tests of the bundled memcached operator against the embedded API server.
//!
//! Every operator here runs in-process (`memcached_operator::run::run`) with a client
//! authenticated as the operator's ServiceAccount, after `operator/config/crd` and
//! `operator/config/rbac` were applied as shipped — so each test also proves that RBAC is
//! sufficient (no request of the ServiceAccount is refused). No kubelet runs: the tests
//! create the operator's Pod objects themselves. The simulated controller manager runs in
//! one test only, for its garbage collector; elsewhere no controller runs and the one job
//! of the garbage collector leader-for-life depends on (deleting the lock of a deleted
//! leader Pod) is done by hand, as the collector does it.
//!
//! Leadership is read from two sides: the lock (the Lease's holderIdentity, the for-life
//! ConfigMap's owner reference) and each candidate's own
//! `leader_election_master_status{name="memcached-operator-lock"}` on its /metrics.
//!
//! `measure_operator_rss_with_100_memcacheds` is ignored: it runs the built binary and
//! prints memory figures, asserting nothing about them.

#[path = "operator/harness.rs"]
mod harness;
mod support;

use std::future::Future;
use std::time::Duration;

use harness::{
    Bench, Candidate, LEADER_GAUGE, LOCK, NS, Process, SA_USER, SHORT_LEASE, chain, holder,
    log_lines_containing, metric, transitions,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::rbac::v1::Role;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, ResourceExt as _};
use memcached_operator::controller::REGISTRY_CONFIGMAP;
use memcached_operator::crd::{FINALIZER, Memcached, MemcachedSpec};
use opconform::sim::faults::RequestMatch;
use support::eventually;

/// The namespace the Memcached objects of these tests live in.
const APP_NS: &str = "cache";
/// for-life flags (the default mode, spelled out).
const FOR_LIFE: &[&str] = &["--leader-election", "for-life"];

// ---------------------------------------------------------------------------------------
// Observations

/// Polls `check` every 100 ms for `window` and fails at the first `Err`.
///
/// A bounded negative observation: it shows that nothing went wrong *during this window*,
/// not that nothing ever will.
async fn holds_for<F, Fut>(what: &str, window: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let end = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < end {
        if let Err(why) = check().await {
            panic!("{what} stopped holding within {window:?}: {why}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The index of the candidate the Lease names, when every candidate's gauge agrees that it
/// alone leads (1) and the others stand by (0).
async fn lease_leader(bench: &Bench, candidates: &[&Candidate]) -> Result<usize, String> {
    let lease = bench.lease().await.ok_or("no lease yet")?;
    let holder = holder(&lease);
    let leader = candidates
        .iter()
        .position(|c| c.is_identity(&holder))
        .ok_or_else(|| format!("the lease names {holder:?}, none of the candidates"))?;
    agree_on(candidates, leader).await?;
    Ok(leader)
}

/// The index of the candidate whose Pod owns the for-life lock, when every candidate's gauge
/// agrees that it alone leads.
async fn for_life_leader(
    bench: &Bench,
    candidates: &[&Candidate],
    pods: &[&Pod],
) -> Result<usize, String> {
    let lock = bench.for_life_lock().await.ok_or("no lock yet")?;
    let owners = lock.metadata.owner_references.clone().unwrap_or_default();
    let [owner] = owners.as_slice() else {
        return Err(format!("the lock has {} owners, not one", owners.len()));
    };
    let leader = pods
        .iter()
        .position(|p| p.uid().as_deref() == Some(owner.uid.as_str()))
        .ok_or_else(|| format!("the lock is owned by uid {}, no candidate's pod", owner.uid))?;
    let pod = pods[leader];
    let expected = ("v1", "Pod", pod.name_any(), pod.uid().unwrap_or_default());
    let got = (
        owner.api_version.as_str(),
        owner.kind.as_str(),
        owner.name.clone(),
        owner.uid.clone(),
    );
    if got != expected {
        return Err(format!("owner reference {got:?}, expected {expected:?}"));
    }
    if candidates[leader].name != pod.name_any() {
        return Err("candidates and pods are not in the same order".into());
    }
    agree_on(candidates, leader).await?;
    Ok(leader)
}

/// Every candidate's gauge: 1 for `leader`, 0 for the others.
async fn agree_on(candidates: &[&Candidate], leader: usize) -> Result<(), String> {
    for (i, c) in candidates.iter().enumerate() {
        let want = u8::from(i == leader);
        match c.leader_gauge().await {
            Some(g) if g == want => {}
            other => {
                return Err(format!(
                    "{} reports {LEADER_GAUGE} = {other:?}, expected {want}",
                    c.name
                ));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Leader with lease

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_two_then_three_candidates_have_exactly_one_holder_and_the_others_stand_by() {
    let bench = Bench::start().await;
    let a = bench.candidate("operator-a", SHORT_LEASE).await;
    let b = bench.candidate("operator-b", SHORT_LEASE).await;

    let two = [&a, &b];
    let leader = eventually(
        "one of two candidates to hold the lease, gauges agreeing",
        || async { lease_leader(&bench, &two).await.ok() },
    )
    .await;
    let created = bench.lease().await.expect("lease");
    assert_eq!(
        transitions(&created),
        0,
        "the first holder created the lease and nobody took it over"
    );
    // 5 s > LeaseDuration 4 s: a standby that missed the renewals would have taken over.
    holds_for(
        "one holder of two, the other standing by",
        Duration::from_secs(5),
        || async {
            let now = lease_leader(&bench, &two).await?;
            let t = transitions(&bench.lease().await.ok_or("lease gone")?);
            (now == leader && t == 0)
                .then_some(())
                .ok_or_else(|| format!("leader {now} (was {leader}), transitions {t}"))
        },
    )
    .await;

    let c = bench.candidate("operator-c", SHORT_LEASE).await;
    let three = [&a, &b, &c];
    holds_for(
        "one holder of three, the others standing by",
        Duration::from_secs(5),
        || async {
            let now = lease_leader(&bench, &three).await?;
            let t = transitions(&bench.lease().await.ok_or("lease gone")?);
            (now == leader && t == 0)
                .then_some(())
                .ok_or_else(|| format!("leader {now} (was {leader}), transitions {t}"))
        },
    )
    .await;
    assert!(
        !a.has_finished() && !b.has_finished() && !c.has_finished(),
        "every candidate is still running"
    );
    bench.assert_no_forbidden_requests();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_release_on_cancel_hands_the_lease_to_a_standby_with_one_more_transition() {
    // LeaseDuration 60 s: a standby could only take over by expiry after 60 s, far beyond
    // the 20 s any wait here may take, so a handover within the wait is the release's doing.
    let flags = [
        "--leader-election",
        "lease",
        "--lease-duration",
        "60s",
        "--renew-deadline",
        "3s",
        "--retry-period",
        "1s",
        "--release-on-cancel",
    ];
    let bench = Bench::start().await;
    let mut candidates = vec![
        bench.candidate("operator-a", &flags).await,
        bench.candidate("operator-b", &flags).await,
    ];
    let leader = {
        let both: Vec<&Candidate> = candidates.iter().collect();
        eventually("one of two candidates to hold the lease", || async {
            lease_leader(&bench, &both).await.ok()
        })
        .await
    };
    let before = transitions(&bench.lease().await.expect("lease"));

    let old = candidates.remove(leader);
    let old_name = old.name.clone();
    old.stop()
        .await
        .unwrap_or_else(|e| panic!("the leader stops cleanly: {}", chain(&e)));

    let standby = &candidates[0];
    eventually("the standby to hold the released lease", || async {
        let lease = bench.lease().await?;
        (standby.is_identity(&holder(&lease)) && standby.leader_gauge().await == Some(1))
            .then_some(())
    })
    .await;
    let after = bench.lease().await.expect("lease");
    assert_eq!(
        transitions(&after),
        before + 1,
        "the handover from {old_name} to {} is exactly one transition",
        standby.name
    );
    assert_eq!(
        after.spec.as_ref().and_then(|s| s.lease_duration_seconds),
        Some(60),
        "the new holder wrote its own lease duration over the released one"
    );
    bench.assert_no_forbidden_requests();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_a_leader_whose_renewals_fail_past_the_renew_deadline_stops_with_leader_election_lost()
 {
    let bench = Bench::start().await;
    let mut a = bench.candidate("operator-a", SHORT_LEASE).await;
    eventually("the only candidate to hold the lease", || async {
        lease_leader(&bench, &[&a]).await.ok()
    })
    .await;

    // Every lease update fails from now on, for longer than RenewDeadline (3 s): the rule is
    // removed only after the leader has stopped.
    let rule = bench
        .server
        .state()
        .faults
        .reject(
            RequestMatch {
                verbs: vec!["update".into()],
                group: Some("coordination.k8s.io".into()),
                resource: Some("leases".into()),
                ..RequestMatch::default()
            },
            500,
            "InternalError",
            "injected fault: lease updates fail",
        )
        .expect("fault rule");
    let err = a
        .exited()
        .await
        .expect_err("a leader that cannot renew stops with an error");
    bench
        .server
        .state()
        .faults
        .allow(rule)
        .expect("fault rule removed");

    let message = chain(&err);
    assert!(
        message.starts_with("leader election lost"),
        "the error says leadership was lost: {message}"
    );
    assert!(
        message.contains("renew deadline"),
        "the error names the renew deadline: {message}"
    );
    assert_eq!(err.exit_code(), 1, "lost leadership exits 1");
    assert_eq!(
        a.leader_gauge().await,
        Some(0),
        "the stopped leader reports itself as not leading"
    );
    // Its controller stopped with it: a Memcached created now is left alone (watched for
    // 2 s; a running controller reconciles a new object within milliseconds here).
    harness::create_namespace(&bench.admin, APP_NS).await;
    create_memcached(&bench, "after-the-loss", 1).await;
    holds_for(
        "no reconcile after leadership was lost",
        Duration::from_secs(2),
        || async {
            let mc = memcached(&bench, "after-the-loss")
                .await
                .ok_or("memcached gone")?;
            let untouched =
                mc.finalizers().is_empty() && deployment(&bench, "after-the-loss").await.is_none();
            untouched
                .then_some(())
                .ok_or_else(|| "the Memcached was reconciled".to_owned())
        },
    )
    .await;
    bench.assert_no_forbidden_requests();
}

// ---------------------------------------------------------------------------------------
// Leader for life

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_life_two_then_three_candidates_have_exactly_one_leader_whose_pod_owns_the_lock() {
    let bench = Bench::start().await;
    let pods = [
        bench.operator_pod("operator-a").await,
        bench.operator_pod("operator-b").await,
        bench.operator_pod("operator-c").await,
    ];
    let a = bench.candidate("operator-a", FOR_LIFE).await;
    let b = bench.candidate("operator-b", FOR_LIFE).await;

    let (two, two_pods) = ([&a, &b], [&pods[0], &pods[1]]);
    let leader = eventually("one of two candidates to own the lock", || async {
        for_life_leader(&bench, &two, &two_pods).await.ok()
    })
    .await;
    // for-life has no expiry to wait out: a standby that misread the lock would act on it at
    // once. Observed for 3 s.
    holds_for("one leader of two", Duration::from_secs(3), || async {
        let now = for_life_leader(&bench, &two, &two_pods).await?;
        (now == leader)
            .then_some(())
            .ok_or_else(|| format!("leader {now}, was {leader}"))
    })
    .await;

    let c = bench.candidate("operator-c", FOR_LIFE).await;
    let (three, three_pods) = ([&a, &b, &c], [&pods[0], &pods[1], &pods[2]]);
    holds_for("one leader of three", Duration::from_secs(3), || async {
        let now = for_life_leader(&bench, &three, &three_pods).await?;
        (now == leader)
            .then_some(())
            .ok_or_else(|| format!("leader {now}, was {leader}"))
    })
    .await;
    let lock = bench.for_life_lock().await.expect("lock");
    assert_eq!(
        lock.labels()
            .get("app.kubernetes.io/name")
            .map(String::as_str),
        Some("memcached-operator"),
        "the lock carries a label naming the operator"
    );
    bench.assert_no_forbidden_requests();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_life_a_standby_of_three_leads_once_the_leader_pod_and_then_its_lock_are_deleted() {
    let bench = Bench::start().await;
    let names = ["operator-a", "operator-b", "operator-c"];
    let mut pods = Vec::new();
    let mut candidates = Vec::new();
    for name in names {
        pods.push(bench.operator_pod(name).await);
        candidates.push(bench.candidate(name, FOR_LIFE).await);
    }
    let leader = {
        let (c, p): (Vec<&Candidate>, Vec<&Pod>) =
            (candidates.iter().collect(), pods.iter().collect());
        eventually("one of three candidates to own the lock", || async {
            for_life_leader(&bench, &c, &p).await.ok()
        })
        .await
    };

    // The leader stops (SIGTERM); leader-for-life never gives the lock up by itself.
    let old = candidates.remove(leader);
    let old_pod = pods.remove(leader);
    old.stop()
        .await
        .unwrap_or_else(|e| panic!("the leader stops cleanly: {}", chain(&e)));
    let lock = bench
        .for_life_lock()
        .await
        .expect("the lock outlives its leader's process");
    assert_eq!(
        lock.owner_references()
            .iter()
            .map(|o| o.uid.as_str())
            .collect::<Vec<_>>(),
        vec![old_pod.uid().unwrap_or_default().as_str()],
        "the lock still names the stopped leader's pod"
    );

    // Its Pod is deleted. No garbage collector runs in these tests, so do what it would do
    // now that the owner is gone: delete the dependent lock, guarded by the lock's uid.
    Api::<Pod>::namespaced(bench.admin.clone(), NS)
        .delete(&old_pod.name_any(), &DeleteParams::default())
        .await
        .expect("leader pod deleted");
    Api::<ConfigMap>::namespaced(bench.admin.clone(), NS)
        .delete(
            LOCK,
            &DeleteParams {
                preconditions: Some(Preconditions {
                    uid: lock.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            },
        )
        .await
        .expect("lock collected");

    let (c, p): (Vec<&Candidate>, Vec<&Pod>) = (candidates.iter().collect(), pods.iter().collect());
    let next = eventually("one of the two standbys to own a new lock", || async {
        for_life_leader(&bench, &c, &p).await.ok()
    })
    .await;
    holds_for(
        "one leader of the remaining two",
        Duration::from_secs(3),
        || async {
            let now = for_life_leader(&bench, &c, &p).await?;
            (now == next)
                .then_some(())
                .ok_or_else(|| format!("leader {now}, was {next}"))
        },
    )
    .await;
    bench.assert_no_forbidden_requests();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_life_the_garbage_collector_frees_a_deleted_leaders_lock_and_a_standby_leads() {
    let bench = Bench::start().await;
    // The simulated controller manager, for its garbage collector (no nodes exist, so the
    // other controllers have nothing to do).
    let _controllers = opconform::sim::in_process::start_controllers(
        &bench.server.handle(),
        opconform::sim::controllers::ControllerConfig::default(),
    )
    .await
    .expect("controllers start");
    let mut pods = vec![
        bench.operator_pod("operator-a").await,
        bench.operator_pod("operator-b").await,
    ];
    let mut candidates = vec![
        bench.candidate("operator-a", FOR_LIFE).await,
        bench.candidate("operator-b", FOR_LIFE).await,
    ];
    let leader = {
        let (c, p): (Vec<&Candidate>, Vec<&Pod>) =
            (candidates.iter().collect(), pods.iter().collect());
        eventually("one of two candidates to own the lock", || async {
            for_life_leader(&bench, &c, &p).await.ok()
        })
        .await
    };
    let old_lock = bench.for_life_lock().await.expect("lock");

    let old = candidates.remove(leader);
    let old_pod = pods.remove(leader);
    old.stop()
        .await
        .unwrap_or_else(|e| panic!("the leader stops cleanly: {}", chain(&e)));
    Api::<Pod>::namespaced(bench.admin.clone(), NS)
        .delete(&old_pod.name_any(), &DeleteParams::default())
        .await
        .expect("leader pod deleted");

    let (c, p) = ([&candidates[0]], [&pods[0]]);
    eventually("the standby to own a new lock", || async {
        for_life_leader(&bench, &c, &p).await.ok()
    })
    .await;
    let new_lock = bench.for_life_lock().await.expect("lock");
    assert_ne!(
        new_lock.uid(),
        old_lock.uid(),
        "the garbage collector deleted the old lock; the standby created its own"
    );
    bench.assert_no_forbidden_requests();
}

// ---------------------------------------------------------------------------------------
// RBAC

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_leases_rule_from_the_role_produces_the_real_forbidden_error_in_the_log() {
    let bench = Bench::start().await;
    let roles = Api::<Role>::namespaced(bench.admin.clone(), NS);
    let mut role = roles
        .get("memcached-operator-leader-election")
        .await
        .expect("the shipped Role");
    let rules = role.rules.take().unwrap_or_default();
    let (leases, rest): (Vec<_>, Vec<_>) = rules
        .into_iter()
        .partition(|r| r.resources.iter().flatten().any(|res| res == "leases"));
    assert_eq!(leases.len(), 1, "the shipped Role has one leases rule");
    role.rules = Some(rest);
    roles
        .replace(
            "memcached-operator-leader-election",
            &PostParams::default(),
            &role,
        )
        .await
        .expect("Role without the leases rule");

    let a = bench.candidate("operator-a", SHORT_LEASE).await;
    let expected = format!(
        "leases.coordination.k8s.io \"{LOCK}\" is forbidden: User \"{SA_USER}\" cannot get resource \
         \"leases\" in API group \"coordination.k8s.io\" in the namespace \"{NS}\""
    );
    let lines = eventually("the forbidden error in the operator's log", || async {
        let lines = log_lines_containing(&expected);
        (!lines.is_empty()).then_some(lines)
    })
    .await;
    assert!(
        lines[0].contains("failed to acquire lease"),
        "the line says what failed: {}",
        lines[0]
    );
    assert!(bench.lease().await.is_none(), "no lease was written");
    assert_eq!(
        a.leader_gauge().await,
        Some(0),
        "the candidate does not lead"
    );

    // The rule back (the shipped RBAC applied again): the same process acquires the lease.
    let rbac = opconform::deploy::read_manifests(&harness::config_dir("rbac")).expect("rbac");
    opconform::deploy::apply_all(
        &bench.admin,
        &rbac,
        opconform::deploy::Namespacing::Into(NS),
    )
    .await
    .expect("shipped RBAC re-applied");
    eventually("the candidate to lead once it may", || async {
        lease_leader(&bench, &[&a]).await.ok()
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// Reconcile

async fn memcached(bench: &Bench, name: &str) -> Option<Memcached> {
    Api::<Memcached>::namespaced(bench.admin.clone(), APP_NS)
        .get_opt(name)
        .await
        .expect("get memcached")
}

async fn deployment(bench: &Bench, name: &str) -> Option<Deployment> {
    Api::<Deployment>::namespaced(bench.admin.clone(), APP_NS)
        .get_opt(name)
        .await
        .expect("get deployment")
}

/// The registry entry of `name` as JSON, if any.
async fn registry_entry(bench: &Bench, name: &str) -> Option<serde_json::Value> {
    let cm = Api::<ConfigMap>::namespaced(bench.admin.clone(), NS)
        .get_opt(REGISTRY_CONFIGMAP)
        .await
        .expect("get registry")?;
    let value = cm.data?.get(&format!("{APP_NS}.{name}"))?.clone();
    Some(serde_json::from_str(&value).expect("registry entries are JSON"))
}

/// Whether `d` has exactly one owner reference: `mc`, as its controller.
fn controlled_by(d: &Deployment, mc: &Memcached) -> bool {
    match d.owner_references() {
        [o] => {
            o.api_version == "cache.example.com/v1alpha1"
                && o.kind == "Memcached"
                && o.name == mc.name_any()
                && Some(o.uid.as_str()) == mc.uid().as_deref()
                && o.controller == Some(true)
        }
        _ => false,
    }
}

fn replicas(d: &Deployment) -> Option<i32> {
    d.spec.as_ref().and_then(|s| s.replicas)
}

async fn create_memcached(bench: &Bench, name: &str, size: i32) -> Memcached {
    let mut mc = Memcached::new(name, MemcachedSpec { size });
    mc.metadata.namespace = Some(APP_NS.into());
    Api::<Memcached>::namespaced(bench.admin.clone(), APP_NS)
        .create(&PostParams::default(), &mc)
        .await
        .expect("memcached created")
}

/// A bench with the app namespace and one operator (lease) that leads.
async fn reconciling_bench() -> (Bench, Candidate) {
    let bench = Bench::start().await;
    harness::create_namespace(&bench.admin, APP_NS).await;
    let op = bench.candidate("operator-a", SHORT_LEASE).await;
    eventually("the operator to lead", || async {
        lease_leader(&bench, &[&op]).await.ok()
    })
    .await;
    (bench, op)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_creates_scales_and_recreates_the_owned_deployment_and_finalizes_on_deletion() {
    let (bench, op) = reconciling_bench().await;
    let mc = create_memcached(&bench, "cache-a", 3).await;

    eventually(
        "an owned Deployment of 3, the finalizer and the registry entry",
        || async {
            let mc = memcached(&bench, "cache-a").await?;
            let d = deployment(&bench, "cache-a").await?;
            let entry = registry_entry(&bench, "cache-a").await?;
            (mc.finalizers().iter().any(|f| f == FINALIZER)
                && controlled_by(&d, &mc)
                && replicas(&d) == Some(3)
                && entry == serde_json::json!({"size": 3, "nodes": []}))
            .then_some(())
        },
    )
    .await;
    let d = deployment(&bench, "cache-a").await.expect("deployment");
    let labels = d.labels();
    assert_eq!(
        (
            labels.get("app").map(String::as_str),
            labels.get("memcached_cr").map(String::as_str)
        ),
        (Some("memcached"), Some("cache-a")),
        "the Deployment is labelled for its Memcached"
    );

    // Size 3 → 4.
    Api::<Memcached>::namespaced(bench.admin.clone(), APP_NS)
        .patch(
            "cache-a",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"size": 4}})),
        )
        .await
        .expect("size patched");
    eventually(
        "the Deployment scaled to 4 and the registry updated",
        || async {
            let d = deployment(&bench, "cache-a").await?;
            let entry = registry_entry(&bench, "cache-a").await?;
            (replicas(&d) == Some(4) && entry["size"] == 4).then_some(())
        },
    )
    .await;

    // The Deployment deleted behind the operator's back is recreated.
    let old_uid = deployment(&bench, "cache-a")
        .await
        .and_then(|d| d.uid())
        .expect("deployment uid");
    Api::<Deployment>::namespaced(bench.admin.clone(), APP_NS)
        .delete("cache-a", &DeleteParams::default())
        .await
        .expect("deployment deleted");
    eventually("a new owned Deployment of 4", || async {
        let d = deployment(&bench, "cache-a").await?;
        (d.uid() != Some(old_uid.clone()) && controlled_by(&d, &mc) && replicas(&d) == Some(4))
            .then_some(())
    })
    .await;

    // Deletion runs the cleanup, then the object disappears.
    Api::<Memcached>::namespaced(bench.admin.clone(), APP_NS)
        .delete("cache-a", &DeleteParams::default())
        .await
        .expect("memcached deleted");
    eventually("the Memcached gone after its cleanup", || async {
        memcached(&bench, "cache-a").await.is_none().then_some(())
    })
    .await;
    assert_eq!(
        registry_entry(&bench, "cache-a").await,
        None,
        "the registry entry was removed"
    );
    let finalized = bench.events(APP_NS, "Finalized", "cache-a").await;
    assert!(
        finalized
            .iter()
            .any(|e| e.type_.as_deref() == Some("Normal")
                && e.message.as_deref() == Some("removed cache.cache-a from the registry")),
        "a Normal Event Finalized about cache-a: {finalized:#?}"
    );
    for (result, at_least) in [("success", 1.0), ("requeue", 1.0)] {
        let series = format!(
            r#"controller_runtime_reconcile_total{{controller="memcached",result="{result}"}}"#
        );
        let n = metric(op.addr, &series).await.unwrap_or(0.0);
        assert!(n >= at_least, "{series} = {n}");
    }
    bench.assert_no_forbidden_requests();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_errors_while_deployment_creation_is_refused_emit_reconcile_error_and_recover_once_allowed()
 {
    let (bench, op) = reconciling_bench().await;
    let faults = bench.server.state().faults.clone();
    let rule = faults
        .reject(
            RequestMatch {
                verbs: vec!["create".into()],
                group: Some("apps".into()),
                resource: Some("deployments".into()),
                namespace: Some(APP_NS.into()),
                ..RequestMatch::default()
            },
            500,
            "InternalError",
            "injected fault: deployment creation refused",
        )
        .expect("fault rule");
    let mc = create_memcached(&bench, "cache-b", 1).await;

    let errors = r#"controller_runtime_reconcile_total{controller="memcached",result="error"}"#;
    let warning = eventually(
        "a ReconcileError Warning Event and an error result",
        || async {
            let event = bench
                .events(APP_NS, "ReconcileError", "cache-b")
                .await
                .into_iter()
                .find(|e| e.type_.as_deref() == Some("Warning"))?;
            let counted = metric(op.addr, errors).await? >= 1.0;
            counted.then_some(event)
        },
    )
    .await;
    let message = warning.message.unwrap_or_default();
    assert!(
        message.contains("failed to create deployment")
            && message.contains("injected fault: deployment creation refused"),
        "the Event names the failed step and the API error: {message}"
    );
    assert!(
        deployment(&bench, "cache-b").await.is_none(),
        "no Deployment while creation is refused"
    );
    assert!(
        memcached(&bench, "cache-b")
            .await
            .is_some_and(|m| m.finalizers().iter().any(|f| f == FINALIZER)),
        "the finalizer was added before the failing step"
    );

    faults.allow(rule).expect("fault rule removed");
    eventually("the Deployment once creation is allowed", || async {
        let d = deployment(&bench, "cache-b").await?;
        (controlled_by(&d, &mc) && replicas(&d) == Some(1)).then_some(())
    })
    .await;
    bench.assert_no_forbidden_requests();
}

// ---------------------------------------------------------------------------------------
// Measurement

/// Prints the operator's memory as a standby and as a leader with 100 Memcached objects.
///
/// Runs the built binary (`cargo build -p memcached-operator`, or set
/// `MEMCACHED_OPERATOR_BIN`) as two processes in lease mode against an in-process API
/// server, creates 100 Memcached objects, waits until the leader has reconciled them all
/// (finalizer, Deployment, registry entry each) and its reconcile count stopped moving,
/// then reads VmRSS and VmHWM from /proc/<pid>/status. Asserts nothing about the numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a test: run with --ignored --nocapture after building the binary"]
async fn measure_operator_rss_with_100_memcacheds() {
    const OBJECTS: usize = 100;
    const BOUND: Duration = Duration::from_secs(300);
    let binary = harness::operator_binary();
    assert!(
        binary.exists(),
        "{} not found: build it with `cargo build -p memcached-operator` or set MEMCACHED_OPERATOR_BIN",
        binary.display()
    );
    let bench = Bench::start().await;
    harness::create_namespace(&bench.admin, APP_NS).await;
    let procs = [
        Process::spawn(&bench, &binary, "operator-0", SHORT_LEASE),
        Process::spawn(&bench, &binary, "operator-1", SHORT_LEASE),
    ];
    let leader = eventually("one of the two processes to lead", || async {
        let g0 = metric(procs[0].addr, LEADER_GAUGE).await?;
        let g1 = metric(procs[1].addr, LEADER_GAUGE).await?;
        match (g0 as u8, g1 as u8) {
            (1, 0) => Some(0),
            (0, 1) => Some(1),
            _ => None,
        }
    })
    .await;
    let standby = 1 - leader;
    let idle = [procs[0].memory(), procs[1].memory()];

    let started = tokio::time::Instant::now();
    for i in 0..OBJECTS {
        create_memcached(&bench, &format!("mc-{i:03}"), 3).await;
    }
    let mcs = Api::<Memcached>::namespaced(bench.admin.clone(), APP_NS);
    let deploys = Api::<Deployment>::namespaced(bench.admin.clone(), APP_NS);
    let done = async {
        loop {
            let finalized = mcs
                .list(&ListParams::default())
                .await
                .expect("list memcacheds")
                .items
                .iter()
                .filter(|m| m.finalizers().iter().any(|f| f == FINALIZER))
                .count();
            let deployed = deploys
                .list(&ListParams::default().labels("app=memcached"))
                .await
                .expect("list deployments")
                .items
                .len();
            let registered = Api::<ConfigMap>::namespaced(bench.admin.clone(), NS)
                .get_opt(REGISTRY_CONFIGMAP)
                .await
                .expect("registry")
                .and_then(|c| c.data)
                .map_or(0, |d| d.len());
            if finalized == OBJECTS && deployed == OBJECTS && registered == OBJECTS {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(BOUND, done).await.unwrap_or_else(|_| {
        panic!(
            "not all {OBJECTS} reconciled within {BOUND:?}: {}",
            procs[leader].stderr()
        )
    });
    let reconciled_in = started.elapsed();
    // Quiet: the success count has not moved for 2 s.
    let success = r#"controller_runtime_reconcile_total{controller="memcached",result="success"}"#;
    let quiet = async {
        let mut last = -1.0;
        loop {
            let now = metric(procs[leader].addr, success).await.unwrap_or(-1.0);
            if now == last {
                return now;
            }
            last = now;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    };
    let successes = tokio::time::timeout(BOUND, quiet)
        .await
        .expect("the leader settles");
    let busy = [procs[0].memory(), procs[1].memory()];

    println!("binary: {}", binary.display());
    println!(
        "{OBJECTS} Memcached objects reconciled in {reconciled_in:?}; {successes} successful reconciles"
    );
    for (role, i) in [("leader", leader), ("standby", standby)] {
        println!(
            "{role} {} (pid {}): before any Memcached: {}; with {OBJECTS} reconciled: {}",
            procs[i].name,
            procs[i].child.id(),
            idle[i],
            busy[i],
        );
    }
}
