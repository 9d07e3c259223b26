//! The recorder against real parts: an in-process API server, its audit and fault log,
//! and tiny `/metrics` servers standing in for operator replicas on loopback pod IPs.

mod support;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Namespace, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use opconform::check;
use opconform::fault::FaultLog;
use opconform::record::recorder::{Feeds, HolderNaming, MetricsEndpoint, Recorder, RecorderConfig};
use opconform::record::{History, Observation};
use opconform::sim::apiserver::ApiServer;
use opconform::sim::faults::RequestMatch;
use opconform::sim::proxy::Proxy;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

const NS: &str = "ops";
const SELECTOR: &str = "app.kubernetes.io/name=memcached-operator";

fn config(metrics_port: u16) -> RecorderConfig {
    RecorderConfig {
        namespace: NS.into(),
        lock_name: "lock".into(),
        pod_selector: SELECTOR.into(),
        metrics: MetricsEndpoint::http(metrics_port),
        holder_naming: HolderNaming::default(),
        scrape_through_api: false,
        scrape_interval: Duration::from_millis(50),
        workload_namespaces: Vec::new(),
    }
}

fn object<K: DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("a valid object")
}

async fn create_namespace(client: &Client) {
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": NS}})),
        )
        .await
        .expect("namespace created");
}

/// Waits until `check` finds what it looks for in the recorder's snapshot.
async fn recorded<T>(recorder: &Recorder, what: &str, check: impl Fn(&History) -> Option<T>) -> T {
    support::eventually(what, || {
        let found = check(&recorder.snapshot());
        async move { found }
    })
    .await
}

fn locks(h: &History) -> Vec<(Option<String>, Option<i64>, String)> {
    h.entries()
        .iter()
        .filter_map(|e| match &e.observation {
            Observation::Lock {
                holder,
                transitions,
                resource_version,
                ..
            } => Some((holder.clone(), *transitions, resource_version.clone())),
            _ => None,
        })
        .collect()
}

fn holders(h: &History) -> Vec<(Option<String>, Option<i64>)> {
    locks(h).into_iter().map(|(h, t, _)| (h, t)).collect()
}

fn gauges(h: &History, replica: &str) -> Vec<bool> {
    h.entries()
        .iter()
        .filter_map(|e| match &e.observation {
            Observation::Gauge {
                replica: r, leader, ..
            } if r == replica => Some(*leader),
            _ => None,
        })
        .collect()
}

fn reconciles(h: &History, replica: &str, result: &str) -> Vec<u64> {
    h.entries()
        .iter()
        .filter_map(|e| match &e.observation {
            Observation::Reconciles {
                replica: r,
                result: res,
                count,
            } if r == replica && res == result => Some(*count),
            _ => None,
        })
        .collect()
}

fn pods(h: &History, name: &str) -> Vec<(String, bool, bool)> {
    h.entries()
        .iter()
        .filter_map(|e| match &e.observation {
            Observation::Pod {
                name: n,
                phase,
                ready,
                terminating,
            } if n == name => Some((phase.clone(), *ready, *terminating)),
            _ => None,
        })
        .collect()
}

/// Creates a pod (labelled as the operator's when `operator`) and writes its status as a
/// kubelet would: Running, ready, with `ip`.
async fn running_pod(client: &Client, name: &str, ip: IpAddr, operator: bool) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let labels = if operator {
        json!({"app.kubernetes.io/name": "memcached-operator"})
    } else {
        json!({"app": "other"})
    };
    pods.create(
        &PostParams::default(),
        &object(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "manager", "image": "memcached-operator:dev"}]},
        })),
    )
    .await
    .expect("pod created");
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": "Running",
            "podIP": ip.to_string(),
            "podIPs": [{"ip": ip.to_string()}],
            "conditions": [{"type": "Ready", "status": "True"}],
        }})),
    )
    .await
    .expect("pod status written");
}

/// A stand-in for one replica's metrics endpoint: what it answers can be changed at will.
#[derive(Clone)]
struct FakeReplica {
    text: Arc<Mutex<String>>,
}

impl FakeReplica {
    /// Serves on `listener`; `chunked` answers with chunked transfer encoding.
    fn serve(listener: TcpListener, chunked: bool) -> Self {
        let replica = FakeReplica {
            text: Arc::new(Mutex::new(String::new())),
        };
        let text = replica.text.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let text = text.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let body = text.lock().unwrap().clone();
                    let response = if chunked {
                        let (a, b) = body.split_at(body.len() / 2);
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
                            a.len(),
                            b.len()
                        )
                    } else {
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        )
                    };
                    let _ = conn.write_all(response.as_bytes()).await;
                });
            }
        });
        replica
    }

    fn set(&self, leader: bool, successes: u64) {
        *self.text.lock().unwrap() = format!(
            "# TYPE leader_election_master_status gauge\n\
             leader_election_master_status{{name=\"lock\"}} {}\n\
             leader_election_master_status{{name=\"other-lock\"}} 1\n\
             # TYPE controller_runtime_reconcile_total counter\n\
             controller_runtime_reconcile_total{{controller=\"memcached\",result=\"success\"}} {successes}\n\
             controller_runtime_reconcile_total{{controller=\"memcached\",result=\"error\"}} 0\n",
            u8::from(leader)
        );
    }
}

/// Binds one listener per address, all on the same port.
async fn listeners(ips: &[IpAddr]) -> (u16, Vec<TcpListener>) {
    for _ in 0..20 {
        let first = TcpListener::bind(SocketAddr::new(ips[0], 0))
            .await
            .expect("bind a loopback address");
        let port = first.local_addr().expect("local address").port();
        let mut all = vec![first];
        for ip in &ips[1..] {
            match TcpListener::bind(SocketAddr::new(*ip, port)).await {
                Ok(l) => all.push(l),
                Err(_) => break,
            }
        }
        if all.len() == ips.len() {
            return (port, all);
        }
    }
    panic!("no port free on all of {ips:?}");
}

/// Two operator pods `op-a` and `op-b` with fake metrics endpoints on their own loopback
/// addresses `127.0.<net>.1` and `.2`.
async fn two_replicas(client: &Client, net: u8) -> (u16, FakeReplica, FakeReplica) {
    let ips: Vec<IpAddr> = (1..=2)
        .map(|host| IpAddr::from([127, 0, net, host]))
        .collect();
    let (port, mut ls) = listeners(&ips).await;
    let b = FakeReplica::serve(ls.pop().expect("listener b"), true);
    let a = FakeReplica::serve(ls.pop().expect("listener a"), false);
    running_pod(client, "op-a", ips[0], true).await;
    running_pod(client, "op-b", ips[1], true).await;
    (port, a, b)
}

#[tokio::test]
async fn a_lease_lock_is_recorded_when_its_holder_changes_and_not_when_it_is_renewed() {
    let (_server, client) = support::server().await;
    create_namespace(&client).await;
    let recorder = Recorder::start(client.clone(), config(1), Feeds::default());
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let spec = |holder: &str, transitions: i64, renew: &str| {
        json!({"spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 4,
            "leaseTransitions": transitions,
            "renewTime": format!("2030-01-01T00:00:{renew}.000000Z"),
        }})
    };
    let renew =
        |second: &str| json!({"spec": {"renewTime": format!("2030-01-01T00:00:{second}.000000Z")}});
    let mut lease = spec("op-a_1234-uuid", 0, "00");
    lease["metadata"] = json!({"name": "lock"});
    leases
        .create(&PostParams::default(), &object(lease))
        .await
        .unwrap();
    recorded(&recorder, "op-a holding the lease", |h| {
        (holders(h) == [(Some("op-a".into()), Some(0))]).then_some(())
    })
    .await;

    let patch = |p: Value| {
        let leases = leases.clone();
        async move {
            leases
                .patch("lock", &PatchParams::default(), &Patch::Merge(p))
                .await
                .unwrap();
        }
    };
    patch(renew("01")).await;
    patch(renew("02")).await;
    patch(spec("op-b_5678", 1, "03")).await;
    patch(renew("04")).await;
    // Another lease in the namespace is not the lock.
    let mut other = spec("op-c_1", 7, "00");
    other["metadata"] = json!({"name": "not-the-lock"});
    leases
        .create(&PostParams::default(), &object(other))
        .await
        .unwrap();
    // An empty holderIdentity is a released lease.
    patch(spec("", 1, "05")).await;
    patch(renew("06")).await;
    leases
        .delete("lock", &DeleteParams::default())
        .await
        .unwrap();

    let history = recorded(&recorder, "the lease deleted", |h| {
        locks(h)
            .last()
            .is_some_and(|(holder, t, _)| holder.is_none() && t.is_none())
            .then(|| h.clone())
    })
    .await;
    // Watch events come in order: every renewal was seen before the deletion was.
    assert_eq!(
        holders(&history),
        vec![
            (Some("op-a".into()), Some(0)),
            (Some("op-b".into()), Some(1)),
            (None, Some(1)),
            (None, None),
        ]
    );
    let versions: Vec<String> = locks(&history).into_iter().map(|(_, _, rv)| rv).collect();
    assert!(versions.iter().all(|rv| !rv.is_empty()), "{versions:?}");
    assert!(check::transitions_never_decrease(&history).passed);
    assert_eq!(history.replicas(), vec!["op-a", "op-b"]);
    let after_stop = recorder.stop().await;
    assert_eq!(holders(&after_stop), holders(&history));
}

#[tokio::test]
async fn a_config_map_lock_is_held_by_the_pod_that_owns_it() {
    let (_server, client) = support::server().await;
    create_namespace(&client).await;
    let recorder = Recorder::start(client.clone(), config(1), Feeds::default());
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let owned_by = |pod: &str| {
        json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": format!("uid-{pod}")}
        ]}})
    };
    let mut lock = owned_by("op-a");
    lock["metadata"]["name"] = json!("lock");
    maps.create(&PostParams::default(), &object(lock))
        .await
        .unwrap();
    recorded(&recorder, "op-a owning the lock", |h| {
        (holders(h) == [(Some("op-a".into()), None)]).then_some(())
    })
    .await;
    let patch = |p: Value| {
        let maps = maps.clone();
        async move {
            maps.patch("lock", &PatchParams::default(), &Patch::Merge(p))
                .await
                .unwrap();
        }
    };
    patch(json!({"data": {"touched": "1"}})).await;
    patch(owned_by("op-b")).await;
    patch(json!({"data": {"touched": "2"}})).await;
    maps.delete("lock", &DeleteParams::default()).await.unwrap();

    let history = recorded(&recorder, "the lock deleted", |h| {
        (holders(h).len() == 3).then(|| h.clone())
    })
    .await;
    assert_eq!(
        holders(&history),
        vec![
            (Some("op-a".into()), None),
            (Some("op-b".into()), None),
            (None, None),
        ]
    );
    recorder.stop().await;
}

#[tokio::test]
async fn every_replica_is_scraped_for_its_gauge_and_for_changes_of_its_reconcile_counts() {
    let (_server, client) = support::server().await;
    create_namespace(&client).await;
    let (port, a, b) = two_replicas(&client, 55).await;
    a.set(true, 1);
    b.set(false, 0);
    let recorder = Recorder::start(client.clone(), config(port), Feeds::default());

    recorded(&recorder, "gauge samples of both replicas", |h| {
        (gauges(h, "op-a").len() >= 3 && gauges(h, "op-b").len() >= 3).then_some(())
    })
    .await;
    a.set(true, 2);
    recorded(&recorder, "op-a's second success", |h| {
        reconciles(h, "op-a", "success").contains(&2).then_some(())
    })
    .await;
    // A clean handover: op-a steps down before op-b leads.
    a.set(false, 2);
    recorded(&recorder, "op-a standing by", |h| {
        (gauges(h, "op-a").last() == Some(&false)).then_some(())
    })
    .await;
    b.set(true, 0);
    let history = recorded(&recorder, "op-b leading", |h| {
        gauges(h, "op-b")
            .ends_with(&[true, true])
            .then(|| h.clone())
    })
    .await;

    assert!(gauges(&history, "op-a").starts_with(&[true]));
    assert!(gauges(&history, "op-b").starts_with(&[false]));
    assert_eq!(reconciles(&history, "op-a", "success"), vec![1, 2]);
    assert_eq!(reconciles(&history, "op-a", "error"), vec![0]);
    assert_eq!(reconciles(&history, "op-b", "success"), vec![0]);
    let verdict = check::single_leader(&history);
    assert!(verdict.passed, "{}", verdict.summary);
    let leaders: Vec<String> = check::gauge_intervals(&history)
        .into_iter()
        .map(|i| i.replica)
        .collect();
    assert_eq!(leaders, vec!["op-a", "op-b"]);
    assert_eq!(
        pods(&history, "op-a"),
        vec![("Running".to_string(), true, false)]
    );

    // A deleted pod is recorded as gone and no longer scraped.
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    pod_api
        .delete("op-b", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let gone = recorded(&recorder, "op-b deleted", |h| {
        pods(h, "op-b")
            .last()
            .is_some_and(|(phase, _, _)| phase == "Deleted")
            .then(|| h.clone())
    })
    .await;
    recorded(&recorder, "op-a scraped after op-b was deleted", |h| {
        (gauges(h, "op-a").len() >= gauges(&gone, "op-a").len() + 3).then_some(())
    })
    .await;
    let last = recorder.stop().await;
    assert!(
        gauges(&last, "op-b").len() <= gauges(&gone, "op-b").len() + 1,
        "op-b scraped after it was gone"
    );
}

#[tokio::test]
async fn two_replicas_claiming_leadership_at_once_fail_the_single_leader_check() {
    let (_server, client) = support::server().await;
    create_namespace(&client).await;
    let (port, a, b) = two_replicas(&client, 56).await;
    a.set(true, 0);
    b.set(true, 0);
    let recorder = Recorder::start(client.clone(), config(port), Feeds::default());
    let history = recorded(&recorder, "both replicas claiming leadership", |h| {
        (gauges(h, "op-a").len() >= 2 && gauges(h, "op-b").len() >= 2).then(|| h.clone())
    })
    .await;
    recorder.stop().await;
    let verdict = check::single_leader(&history);
    assert!(!verdict.passed);
    assert!(
        verdict.summary.contains("op-a") && verdict.summary.contains("op-b"),
        "{}",
        verdict.summary
    );
    assert!(
        verdict
            .evidence
            .iter()
            .any(|e| matches!(e.observation, Observation::Gauge { .. }))
    );
}

#[tokio::test]
async fn a_frozen_replica_delays_no_other_and_only_a_refusing_one_is_recorded_down() {
    let (_server, client) = support::server().await;
    create_namespace(&client).await;
    let ips: Vec<IpAddr> = (1..=3).map(|h| IpAddr::from([127, 0, 57, h])).collect();
    let (port, mut ls) = listeners(&ips).await;
    // op-c: nothing listens (connection refused).
    drop(ls.pop());
    // op-b: accepts connections (the kernel does) but never answers, like a stopped process.
    let _frozen = ls.pop().expect("listener b");
    let a = FakeReplica::serve(ls.pop().expect("listener a"), false);
    a.set(true, 0);
    running_pod(&client, "op-a", ips[0], true).await;
    running_pod(&client, "op-b", ips[1], true).await;
    running_pod(&client, "op-c", ips[2], true).await;

    let recorder = Recorder::start(client.clone(), config(port), Feeds::default());
    recorded(&recorder, "op-a's first sample", |h| {
        (!gauges(h, "op-a").is_empty()).then_some(())
    })
    .await;
    let started = Instant::now();
    let first = gauges(&recorder.snapshot(), "op-a").len();
    recorded(&recorder, "20 more samples of op-a", |h| {
        (gauges(h, "op-a").len() >= first + 20).then_some(())
    })
    .await;
    let took = started.elapsed();
    let history = recorder.stop().await;
    // Scraped one after another, each sample of op-a would wait out op-b's 300 ms timeout.
    assert!(
        took < Duration::from_secs(4),
        "20 samples of op-a took {took:?}"
    );
    assert!(gauges(&history, "op-b").is_empty());
    assert!(gauges(&history, "op-c").is_empty());
    assert!(reconciles(&history, "op-b", "success").is_empty());
    let down = |replica: &str| {
        history
            .entries()
            .iter()
            .filter(
                |e| matches!(&e.observation, Observation::Down { replica: r, .. } if r == replica),
            )
            .count()
    };
    assert_eq!(down("op-c"), 1, "nothing listens for op-c: down, once");
    assert_eq!(
        down("op-b"),
        0,
        "op-b accepts and never answers: frozen, not down"
    );
    assert_eq!(down("op-a"), 0);
}

/// Every write recorded: verb, resource, name, code, election.
fn writes(h: &History) -> Vec<(String, String, String, u16, bool)> {
    h.entries()
        .iter()
        .filter_map(|e| match &e.observation {
            Observation::Write {
                verb,
                resource,
                name,
                code,
                election,
                ..
            } => Some((
                verb.clone(),
                resource.clone(),
                name.clone(),
                *code,
                *election,
            )),
            _ => None,
        })
        .collect()
}

/// A client whose requests reach the server through a proxy from `ip`, as a pod's would.
async fn client_from(server: &ApiServer, ip: IpAddr, user: &str) -> (Proxy, Client) {
    let proxy = Proxy::start(user, server.addr(), ip)
        .await
        .expect("proxy starts");
    let token = server.user_token(user, &["system:masters"]);
    let client = ApiServer::client_for(&server.kubeconfig_for(
        &format!("https://{}", proxy.addr()),
        user,
        &token,
    ))
    .await
    .expect("client");
    (proxy, client)
}

fn deployment(name: &str) -> Deployment {
    object(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "memcached", "image": "memcached:1.6"}]},
            },
        },
    }))
}

/// A recorder of `server`'s cluster that also follows its audit.
fn recording_writes(client: &Client, server: &ApiServer) -> Recorder {
    Recorder::start(
        client.clone(),
        config(1),
        Feeds {
            audit: Some(opconform::cluster::sim::audit_feed(server)),
            faults: None,
        },
    )
}

#[tokio::test]
async fn a_caught_up_history_holds_every_write_answered_before_it_was_asked_for() {
    let (server, client) = support::server().await;
    create_namespace(&client).await;
    let ip = IpAddr::from([127, 0, 59, 1]);
    running_pod(&client, "op-a", ip, true).await;
    let recorder = recording_writes(&client, &server);
    recorded(&recorder, "op-a seen", |h| {
        (!pods(h, "op-a").is_empty()).then_some(())
    })
    .await;
    let (_proxy, op_a) = client_from(&server, ip, "op-a-user").await;
    let config_maps: Api<ConfigMap> = Api::namespaced(op_a, NS);
    for i in 0..20 {
        config_maps
            .create(
                &PostParams::default(),
                &object(json!({"metadata": {"name": format!("cm-{i}")}})),
            )
            .await
            .unwrap();
    }
    // No polling: the history asked for after the last answer has all twenty.
    let history = recorder.caught_up().await;
    let created = writes(&history)
        .into_iter()
        .filter(|(verb, resource, _, code, _)| {
            verb == "create" && resource == "configmaps" && *code == 201
        })
        .count();
    assert_eq!(created, 20, "{:?}", writes(&history));
    recorder.stop().await;
}

#[tokio::test]
async fn writes_from_the_operators_pods_are_recorded_with_their_replica_and_election_flag() {
    let (server, client) = support::server().await;
    create_namespace(&client).await;
    let (ip_a, ip_other) = (IpAddr::from([127, 0, 58, 1]), IpAddr::from([127, 0, 58, 2]));
    running_pod(&client, "op-a", ip_a, true).await;
    running_pod(&client, "other", ip_other, false).await;
    running_pod(&client, "op-b", IpAddr::from([127, 0, 58, 3]), true).await;
    let recorder = recording_writes(&client, &server);
    let (_proxy_a, op_a) = client_from(&server, ip_a, "op-a-user").await;
    let (_proxy_other, other) = client_from(&server, ip_other, "other-user").await;

    let leases: Api<Lease> = Api::namespaced(op_a.clone(), NS);
    let lease: Lease = object(json!({
        "metadata": {"name": "lock"},
        "spec": {"holderIdentity": "op-a_42", "leaseDurationSeconds": 4, "leaseTransitions": 0},
    }));
    leases.create(&PostParams::default(), &lease).await.unwrap();
    leases
        .patch(
            "lock",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"renewTime": "2030-01-01T00:00:01.000000Z"}})),
        )
        .await
        .unwrap();
    let conflict = leases.create(&PostParams::default(), &lease).await;
    assert!(conflict.is_err(), "the lock already exists");
    Api::<CoreEvent>::namespaced(op_a.clone(), NS)
        .create(
            &PostParams::default(),
            &object(json!({
                "metadata": {"name": "op-a.became-leader"},
                "involvedObject": {"kind": "Lease", "name": "lock", "namespace": NS},
                "reason": "LeaderElection", "message": "op-a_42 became leader", "type": "Normal",
            })),
        )
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(op_a.clone(), NS)
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "registry"}})),
        )
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(op_a.clone(), NS);
    deployments
        .create(&PostParams::default(), &deployment("web"))
        .await
        .unwrap();
    assert!(
        deployments
            .create(&PostParams::default(), &deployment("web"))
            .await
            .is_err()
    );
    deployments.get("web").await.unwrap();
    // Deleting another replica's Pod (a for-life standby freeing an evicted leader's lock)
    // is election traffic; deleting any other pod is not.
    recorded(&recorder, "op-b seen", |h| {
        (!pods(h, "op-b").is_empty()).then_some(())
    })
    .await;
    let pods_of_a: Api<Pod> = Api::namespaced(op_a.clone(), NS);
    pods_of_a
        .delete("op-b", &DeleteParams::default())
        .await
        .unwrap();
    pods_of_a
        .delete("other", &DeleteParams::default())
        .await
        .unwrap();
    // Not the operator's: another pod in the namespace, and the admin (no pod).
    Api::<ConfigMap>::namespaced(other, NS)
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "theirs"}})),
        )
        .await
        .unwrap();
    Api::<Deployment>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &deployment("by-admin"))
        .await
        .unwrap();

    let history = recorded(&recorder, "nine writes by op-a and the lock held", |h| {
        (writes(h).len() >= 9 && !holders(h).is_empty()).then(|| h.clone())
    })
    .await;
    recorder.stop().await;
    for e in history.entries() {
        if let Observation::Write {
            replica, namespace, ..
        } = &e.observation
        {
            assert_eq!((replica.as_str(), namespace.as_str()), ("op-a", NS));
        }
    }
    let w = |verb: &str, resource: &str, name: &str, code: u16, election: bool| {
        (
            verb.to_string(),
            resource.to_string(),
            name.to_string(),
            code,
            election,
        )
    };
    // The audit names what a successful create made; a refused create (409) stays unnamed
    // and is recognised as election traffic by its resource and code.
    assert_eq!(
        writes(&history),
        vec![
            w("create", "leases", "lock", 201, true),
            w("patch", "leases", "lock", 200, true),
            w("create", "leases", "", 409, true),
            w("create", "events", "op-a.became-leader", 201, true),
            w("create", "configmaps", "registry", 201, false),
            w("create", "deployments", "web", 201, false),
            w("create", "deployments", "", 409, false),
            w("delete", "pods", "op-b", 200, true),
            w("delete", "pods", "other", 200, false),
        ]
    );
    let verdict = check::single_writer(&history);
    assert!(verdict.passed, "{}", verdict.summary);
}

#[tokio::test]
async fn faults_appear_once_each_however_many_snapshots_are_taken() {
    let (server, client) = support::server().await;
    create_namespace(&client).await;
    let faults = server.state().faults.clone();
    let recorder = Recorder::start(
        client.clone(),
        config(1),
        Feeds {
            audit: None,
            faults: Some(FaultLog::kept_in(std::sync::Arc::new(
                opconform::cluster::sim_parts::SimRules::new(faults.clone()),
            ))),
        },
    );
    recorder.note("rejecting deployment creation");
    let rule = faults
        .reject(
            RequestMatch {
                verbs: vec!["create".into()],
                resource: Some("deployments".into()),
                ..Default::default()
            },
            500,
            "InternalError",
            "injected",
        )
        .unwrap();
    faults.allow(rule).unwrap();
    let fault_entries = |h: &History| -> Vec<(String, String, String)> {
        h.entries()
            .iter()
            .filter_map(|e| match &e.observation {
                Observation::Fault {
                    verb,
                    target,
                    detail,
                } => Some((verb.clone(), target.clone(), detail.clone())),
                _ => None,
            })
            .collect()
    };
    for _ in 0..3 {
        let h = recorder.snapshot();
        let seen = fault_entries(&h);
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0].0, "reject");
        assert_eq!(seen[0].1, format!("rule {rule}: create deployments"));
        assert_eq!(seen[0].2, "500 InternalError");
        assert_eq!(seen[1].0, "allow");
    }
    let history = tokio::time::timeout(Duration::from_secs(5), recorder.stop())
        .await
        .expect("stop ends every task");
    assert_eq!(fault_entries(&history).len(), 2);
    // The note came first, then the faults, in time order.
    assert!(matches!(
        &history.entries()[0].observation,
        Observation::Note { text } if text == "rejecting deployment creation"
    ));
    let times: Vec<_> = history.entries().iter().map(|e| e.time).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
}

/// Objects and events as recorded: `(kind, namespace, name or involved, what)`.
fn workload(h: &History) -> Vec<(String, String, String, String)> {
    h.entries()
        .iter()
        .filter_map(|e| {
            let (kind, namespace, name) = match &e.observation {
                Observation::Memcached {
                    namespace, name, ..
                } => ("memcached", namespace, name),
                Observation::Deployment {
                    namespace, name, ..
                } => ("deployment", namespace, name),
                Observation::Event {
                    namespace,
                    involved,
                    ..
                } => ("event", namespace, involved),
                _ => return None,
            };
            Some((
                kind.to_string(),
                namespace.clone(),
                name.clone(),
                e.observation.to_string(),
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memcached_created_scaled_and_deleted_is_recorded_with_its_deployment_and_events() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    use opconform::record::Change;
    use opconform::sim::{SimCluster, SimClusterConfig};

    let dir = tempfile::tempdir().unwrap();
    let cluster = SimCluster::start(SimClusterConfig {
        work_dir: Some(dir.path().join("cluster")),
        ..SimClusterConfig::fast()
    })
    .await
    .expect("the cluster starts");
    let client = cluster.server().admin_client().await.unwrap();
    for ns in [NS, "elsewhere"] {
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &object(json!({"metadata": {"name": ns}})),
            )
            .await
            .unwrap();
    }
    let crd = opconform::deploy::read_manifests(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("operator/config/crd"),
    )
    .unwrap();
    opconform::deploy::apply_all(
        &client,
        &crd,
        opconform::deploy::Namespacing::Default("default"),
    )
    .await
    .unwrap();
    // As on the simulator: every namespace; as on a shared cluster: the scenario's own.
    let everywhere = Recorder::start(client.clone(), config(1), Feeds::default());
    let scoped = Recorder::start(
        client.clone(),
        RecorderConfig {
            workload_namespaces: vec!["default".into()],
            ..config(1)
        },
        Feeds::default(),
    );

    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cache.example.com", "v1alpha1", "Memcached"),
        "memcacheds",
    );
    let memcacheds: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let memcached = |name: &str, size: i64| -> DynamicObject {
        object(json!({
            "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
            "metadata": {"name": name}, "spec": {"size": size},
        }))
    };
    let elsewhere: Api<DynamicObject> = Api::namespaced_with(client.clone(), "elsewhere", &ar);
    support::eventually("the Memcached type to be served", || async {
        elsewhere
            .create(&PostParams::default(), &memcached("far", 1))
            .await
            .ok()
    })
    .await;
    let merge = |value: Value| Patch::Merge(value);
    let pp = PatchParams::default();
    let events = |ns: &str| Api::<CoreEvent>::namespaced(client.clone(), ns);
    let event = |name: &str, about: (&str, &str), reason: &str, message: &str| -> CoreEvent {
        object(json!({
            "metadata": {"name": name},
            "involvedObject": {"kind": about.0, "name": about.1},
            "type": "Normal", "reason": reason, "message": message, "count": 1,
            "reportingComponent": "memcached-operator", "reportingInstance": "op-a",
        }))
    };
    let election = event("lock.1", ("Lease", "lock"), "LeaderElection", "op-a leads");
    events(NS)
        .create(&PostParams::default(), &election)
        .await
        .unwrap();
    Api::<Deployment>::namespaced(client.clone(), "elsewhere")
        .create(&PostParams::default(), &deployment("web"))
        .await
        .unwrap();
    let mc = memcacheds
        .create(&PostParams::default(), &memcached("cache", 2))
        .await
        .unwrap();
    // Every watch is under way before anything changes.
    let has = |h: &History, kind: &str, name: &str| {
        workload(h)
            .iter()
            .any(|(k, _, n, _)| k == kind && n == name)
    };
    recorded(&everywhere, "far, web, cache and the election", |h| {
        (has(h, "memcached", "far")
            && has(h, "deployment", "web")
            && has(h, "memcached", "cache")
            && has(h, "event", "Lease/lock"))
        .then_some(())
    })
    .await;
    recorded(&scoped, "cache and the election", |h| {
        (has(h, "memcached", "cache") && has(h, "event", "Lease/lock")).then_some(())
    })
    .await;
    memcacheds
        .patch(
            "cache",
            &pp,
            &merge(json!({"metadata": {"finalizers": ["cache.example.com/finalizer"]}})),
        )
        .await
        .unwrap();
    // The Deployment the operator would create, owned by the Memcached.
    let mut owned = deployment("cache");
    owned.spec.as_mut().unwrap().replicas = Some(2);
    owned.metadata.owner_references = Some(vec![object(json!({
        "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached", "name": "cache",
        "uid": mc.metadata.uid.clone().unwrap(), "controller": true, "blockOwnerDeletion": true,
    }))]);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments
        .create(&PostParams::default(), &owned)
        .await
        .unwrap();
    // The operator's own Deployment is not recorded (its pods are).
    Api::<Deployment>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &deployment("memcached-operator"))
        .await
        .unwrap();
    let created = event(
        "cache.1",
        ("Memcached", "cache"),
        "Created",
        "created deployment cache",
    );
    events("default")
        .create(&PostParams::default(), &created)
        .await
        .unwrap();
    // The same Event again: its count grows; a new timestamp alone is nothing new.
    events("default")
        .patch("cache.1", &pp, &merge(json!({"count": 2})))
        .await
        .unwrap();
    events("default")
        .patch(
            "cache.1",
            &pp,
            &merge(json!({"lastTimestamp": "2030-01-01T00:00:00Z"})),
        )
        .await
        .unwrap();
    let ready = |replicas: i32| {
        let deployments = deployments.clone();
        async move {
            support::eventually("the Deployment to be ready", || async {
                let d = deployments.get("cache").await.ok()?;
                let status = d.status?;
                (status.ready_replicas == Some(replicas)).then_some(())
            })
            .await
        }
    };
    ready(2).await;
    memcacheds
        .patch_status(
            "cache",
            &pp,
            &merge(json!({"status": {"nodes": ["cache-a", "cache-b"]}})),
        )
        .await
        .unwrap();
    // Scaled to 3.
    memcacheds
        .patch("cache", &pp, &merge(json!({"spec": {"size": 3}})))
        .await
        .unwrap();
    deployments
        .patch("cache", &pp, &merge(json!({"spec": {"replicas": 3}})))
        .await
        .unwrap();
    ready(3).await;
    // Deleted: Terminating until the finalizer goes, then gone, and its Deployment collected.
    memcacheds
        .delete("cache", &DeleteParams::default())
        .await
        .unwrap();
    events("default")
        .create(
            &PostParams::default(),
            &event(
                "cache.2",
                ("Memcached", "cache"),
                "Finalized",
                "removed default.cache",
            ),
        )
        .await
        .unwrap();
    memcacheds
        .patch(
            "cache",
            &pp,
            &merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();

    let deployment_gone = |h: &History| {
        h.entries().iter().any(|e| {
            matches!(&e.observation, Observation::Deployment { name, change: Change::Deleted, .. } if name == "cache")
        })
    };
    let history = recorded(&everywhere, "the Deployment collected", |h| {
        deployment_gone(h).then(|| h.clone())
    })
    .await;
    let shared = recorded(&scoped, "the Deployment collected", |h| {
        deployment_gone(h).then(|| h.clone())
    })
    .await;
    everywhere.stop().await;
    scoped.stop().await;
    cluster.shutdown().await;

    let all = workload(&history);
    let of = |kind: &str, name: &str| -> Vec<String> {
        all.iter()
            .filter(|(k, _, n, _)| k == kind && n == name)
            .map(|(_, _, _, what)| what.clone())
            .collect()
    };
    let shown = all
        .iter()
        .map(|(.., what)| what.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    // Each change of the Memcached once, in order; the generation moves with the spec.
    let memcached_changes: Vec<(Change, Option<i64>, bool, bool, usize)> = history
        .entries()
        .iter()
        .filter_map(|e| match &e.observation {
            Observation::Memcached {
                name,
                change,
                size,
                finalizer,
                terminating,
                nodes,
                ..
            } if name == "cache" => Some((*change, *size, *finalizer, *terminating, *nodes)),
            _ => None,
        })
        .collect();
    assert_eq!(
        memcached_changes,
        vec![
            (Change::Added, Some(2), false, false, 0),
            (Change::Modified, Some(2), true, false, 0),
            (Change::Modified, Some(2), true, false, 2),
            (Change::Modified, Some(3), true, false, 2),
            (Change::Modified, Some(3), true, true, 2),
            // As last stored: the update that took the last finalizer deleted it instead.
            (Change::Deleted, Some(3), true, true, 2),
        ],
        "{shown}"
    );
    assert!(
        of("memcached", "cache")[3].contains("generation 2"),
        "{shown}"
    );
    // The Deployment: added owned by the Memcached, ready at 2, scaled and ready at 3,
    // collected; never the same state twice in a row.
    let deployment = of("deployment", "cache");
    assert!(
        deployment[0].contains("added: 2 replica(s), 0 ready")
            && deployment[0].contains("owned by Memcached/cache"),
        "{shown}"
    );
    assert!(
        deployment
            .iter()
            .any(|d| d.contains("2 replica(s), 2 ready, 2 available")),
        "{shown}"
    );
    assert!(
        deployment
            .iter()
            .any(|d| d.contains("3 replica(s), 3 ready, 3 available")),
        "{shown}"
    );
    assert!(deployment.last().unwrap().contains("deleted"), "{shown}");
    assert!(deployment.windows(2).all(|w| w[0] != w[1]), "{shown}");
    assert!(of("deployment", "memcached-operator").is_empty(), "{shown}");
    // Events: once each, again when the count grew; the operator's namespace included.
    assert_eq!(
        of("event", "Memcached/cache"),
        [
            "event    default Memcached/cache Normal Created: created deployment cache (by memcached-operator op-a)",
            "event    default Memcached/cache Normal Created: created deployment cache (by memcached-operator op-a, 2 times)",
            "event    default Memcached/cache Normal Finalized: removed default.cache (by memcached-operator op-a)",
        ],
        "{shown}"
    );
    assert_eq!(of("event", "Lease/lock").len(), 1, "{shown}");
    assert_eq!(of("memcached", "far").len(), 1, "{shown}");
    // On a shared cluster only the scenario's namespaces are recorded.
    let scoped_all = workload(&shared);
    assert!(
        scoped_all
            .iter()
            .all(|(_, ns, ..)| ns == "default" || ns == NS),
        "{scoped_all:?}"
    );
    assert!(
        scoped_all
            .iter()
            .any(|(k, ns, ..)| k == "event" && ns == NS)
    );
    assert_eq!(
        scoped_all.iter().filter(|(k, ..)| k == "memcached").count(),
        memcached_changes.len()
    );
    let verdict = check::single_writer(&history);
    assert!(verdict.passed, "{}", verdict.summary);
    assert!(history.replicas().is_empty(), "{:?}", history.replicas());
}
