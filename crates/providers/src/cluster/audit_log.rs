//! Following an audit log file as it grows: the audit of providers whose API server writes
//! one (a running `opconform sim --audit-log`, or kube-apiserver's log on kind), turned
//! into the same live feed the embedded simulator gives.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead as _, BufReader, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use tokio::sync::{broadcast, mpsc};

use super::ProviderError;
use crate::audit::{AuditFeed, AuditRecord, CatchUpRequest, PodRef};

/// How often the file is read for new lines.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Turns one line of the log into an event (`None` skips the line).
pub type LineParser = fn(&str) -> Option<AuditRecord>;

/// Parses a line written by `opconform sim --audit-log`.
pub fn parse_sim_line(line: &str) -> Option<AuditRecord> {
    serde_json::from_str(line).ok()
}

/// Pods by IP address (as text), for attributing requests by their source address.
pub type PodsByIp = Arc<RwLock<HashMap<String, PodRef>>>;

/// Keeps `pods` up to date with the address of every pod `api` lists, until the returned
/// task is aborted.
pub fn watch_pod_addresses(
    api: kube::Api<k8s_openapi::api::core::v1::Pod>,
    pods: PodsByIp,
) -> tokio::task::JoinHandle<()> {
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, watcher};
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let Ok(event) = event else { continue };
            let mut map = pods.write().unwrap_or_else(|p| p.into_inner());
            match event {
                watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                    if let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) {
                        map.insert(
                            ip,
                            PodRef {
                                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                                name: pod.metadata.name.clone().unwrap_or_default(),
                                uid: pod.metadata.uid.clone().unwrap_or_default(),
                            },
                        );
                    }
                }
                watcher::Event::Delete(pod) => {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    map.retain(|_, p| p.uid != uid);
                }
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
        }
    })
}

/// The `user.extra` key kube-apiserver gives a ServiceAccount token bound to a pod.
pub const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// The `user.extra` key with that pod's UID.
pub const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";

/// One line of kube-apiserver's JSON audit log (`audit.k8s.io/v1` `Event`), the fields
/// the feed needs.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KubeAuditEvent {
    api_version: String,
    kind: String,
    stage: String,
    verb: String,
    user: KubeUser,
    #[serde(default)]
    impersonated_user: Option<KubeUser>,
    #[serde(default, rename = "sourceIPs")]
    source_ips: Vec<String>,
    #[serde(default)]
    object_ref: Option<KubeObjectRef>,
    #[serde(default)]
    response_status: Option<KubeStatus>,
    request_received_timestamp: DateTime<Utc>,
}

#[derive(Debug, Default, Deserialize)]
struct KubeUser {
    #[serde(default)]
    username: String,
    #[serde(default)]
    extra: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct KubeObjectRef {
    resource: String,
    namespace: String,
    name: String,
    api_group: String,
    subresource: String,
}

#[derive(Debug, Default, Deserialize)]
struct KubeStatus {
    #[serde(default)]
    code: u16,
}

/// The pod a ServiceAccount token was bound to, from the user's extra claims: name and
/// UID from the claims, namespace from `system:serviceaccount:<namespace>:<name>`.
fn pod_of_token(user: &KubeUser) -> Option<PodRef> {
    let first = |key: &str| user.extra.get(key).and_then(|v| v.first()).cloned();
    let name = first(POD_NAME_EXTRA)?;
    let namespace = user
        .username
        .strip_prefix("system:serviceaccount:")?
        .split(':')
        .next()?
        .to_string();
    Some(PodRef {
        namespace,
        name,
        uid: first(POD_UID_EXTRA).unwrap_or_default(),
    })
}

/// Parses one line of kube-apiserver's audit log into an event numbered `seq`.
///
/// Only the `ResponseComplete` and `Panic` stages become events (one per request, with
/// its response code). The requesting pod is the one its ServiceAccount token was bound
/// to (`authentication.kubernetes.io/pod-name` in the user's extra), else the pod in
/// `pods_by_ip` with the request's first source address.
///
/// # Caveats
/// On kind, traffic from pods to the API server is masqueraded to the node's address by
/// the CNI, so the source address names a node, not a pod, unless the pod's token says
/// which pod it is (bound tokens, the default since Kubernetes 1.22).
pub fn parse_kube_apiserver_line(
    line: &str,
    seq: u64,
    pods_by_ip: &HashMap<String, PodRef>,
) -> Option<AuditRecord> {
    let ev: KubeAuditEvent = serde_json::from_str(line).ok()?;
    if ev.kind != "Event"
        || !ev.api_version.starts_with("audit.k8s.io/")
        || !matches!(ev.stage.as_str(), "ResponseComplete" | "Panic")
    {
        return None;
    }
    let source_ip = ev.source_ips.first().cloned().unwrap_or_default();
    let effective = ev.impersonated_user.unwrap_or(ev.user);
    let pod = pod_of_token(&effective).or_else(|| pods_by_ip.get(&source_ip).cloned());
    let object = ev.object_ref.unwrap_or_default();
    Some(AuditRecord {
        time: ev.request_received_timestamp,
        seq,
        user: effective.username,
        pod,
        verb: ev.verb,
        api_group: object.api_group,
        resource: object.resource,
        subresource: object.subresource,
        namespace: object.namespace,
        name: object.name,
        code: ev.response_status.map_or(0, |s| s.code),
    })
}

/// A parser of kube-apiserver audit lines for [`follow_file`]: numbers the events from 1
/// and attributes them to pods (see [`parse_kube_apiserver_line`]).
pub fn kube_apiserver_lines(pods_by_ip: PodsByIp) -> impl FnMut(&str) -> Option<AuditRecord> {
    let mut seq = 0;
    move |line| {
        let pods = pods_by_ip.read().unwrap_or_else(|p| p.into_inner());
        let ev = parse_kube_apiserver_line(line, seq + 1, &pods)?;
        seq += 1;
        Some(ev)
    }
}

/// A parser for [`follow_file`] of either format, line by line: kube-apiserver's audit
/// events (numbered from 1, pods from their tokens) and `opconform sim --audit-log`
/// lines.
pub fn any_format_lines() -> impl FnMut(&str) -> Option<AuditRecord> {
    let mut kube = kube_apiserver_lines(PodsByIp::default());
    move |line| {
        if line.contains("\"audit.k8s.io/") {
            kube(line)
        } else {
            parse_sim_line(line)
        }
    }
}

/// Follows `path` from its current end: every complete line appended later is parsed
/// and sent on the returned feed, read every [`POLL_INTERVAL`] and whenever the feed is
/// asked to catch up. The follower stops when every receiver is dropped.
///
/// # Errors
/// When the file cannot be opened.
pub fn follow_file(
    path: &Path,
    parse: impl FnMut(&str) -> Option<AuditRecord> + Send + 'static,
) -> Result<AuditFeed, ProviderError> {
    let file_error = |source| ProviderError::File {
        action: "cannot follow the audit log",
        path: path.display().to_string(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(file_error)?;
    let start = file.seek(SeekFrom::End(0)).map_err(file_error)?;
    let (tx, rx) = broadcast::channel(65_536);
    let (asks, mut asked) = mpsc::channel::<CatchUpRequest>(16);
    let mut follower = Follower {
        reader: BufReader::new(file),
        path: path.to_path_buf(),
        offset: start,
        partial: String::new(),
        parse,
        tx,
        last_seq: 0,
    };
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(POLL_INTERVAL);
        loop {
            let answer = tokio::select! {
                _ = ticker.tick() => None,
                Some(answer) = asked.recv() => Some(answer),
            };
            if follower.tx.receiver_count() == 0 {
                return;
            }
            let read = follower.read_to_end();
            if let Some(answer) = answer {
                let _ = answer.send(follower.last_seq);
            }
            if let Err(e) = read {
                eprintln!(
                    "opconform: reading the audit log {} failed at byte {}: {e}",
                    follower.path.display(),
                    follower.offset
                );
                return;
            }
        }
    });
    Ok(AuditFeed::followed(rx, asks))
}

/// [`follow_file`], or `None` after printing why the file cannot be followed: a run
/// without the audit still checks everything but the writes.
pub fn followed_or_warned(
    path: &Path,
    parse: impl FnMut(&str) -> Option<AuditRecord> + Send + 'static,
) -> Option<AuditFeed> {
    match follow_file(path, parse) {
        Ok(feed) => Some(feed),
        Err(e) => {
            eprintln!("opconform: {}", crate::error_chain(&e));
            None
        }
    }
}

/// The state of [`follow_file`]'s task.
struct Follower<P> {
    reader: BufReader<std::fs::File>,
    path: PathBuf,
    offset: u64,
    /// A line read before its end was written.
    partial: String,
    parse: P,
    tx: broadcast::Sender<AuditRecord>,
    /// The `seq` of the last record sent.
    last_seq: u64,
}

impl<P: FnMut(&str) -> Option<AuditRecord>> Follower<P> {
    /// Sends every complete line up to the end of the file.
    fn read_to_end(&mut self) -> std::io::Result<()> {
        loop {
            let mut line = String::new();
            let n = self.reader.read_line(&mut line)?;
            if n == 0 {
                return Ok(());
            }
            self.offset += n as u64;
            self.partial.push_str(&line);
            if !self.partial.ends_with('\n') {
                continue;
            }
            if let Some(record) = (self.parse)(self.partial.trim_end()) {
                self.last_seq = self.last_seq.max(record.seq);
                let _ = self.tx.send(record);
            }
            self.partial.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn line(seq: u64) -> String {
        format!(
            r#"{{"time":"2026-01-01T00:00:00Z","seq":{seq},"user":"u","groups":[],"sourceIp":"127.0.0.1","verb":"create","apiGroup":"","resource":"configmaps","requestUri":"/api/v1/namespaces/n/configmaps","code":201}}"#
        )
    }

    #[tokio::test]
    async fn only_lines_appended_after_the_start_are_followed_even_when_written_in_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        std::fs::write(&path, format!("{}\n", line(1))).unwrap();
        let (mut feed, _) = follow_file(&path, parse_sim_line).unwrap().into_parts();
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        let second = line(2);
        let (head, tail) = second.split_at(40);
        write!(file, "{head}").unwrap();
        file.flush().unwrap();
        tokio::time::sleep(POLL_INTERVAL * 3).await;
        writeln!(file, "{tail}").unwrap();
        writeln!(file, "not json").unwrap();
        writeln!(file, "{}", line(3)).unwrap();
        let first = tokio::time::timeout(Duration::from_secs(10), feed.recv())
            .await
            .unwrap()
            .unwrap();
        let next = tokio::time::timeout(Duration::from_secs(10), feed.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((first.seq, next.seq), (2, 3));
    }

    #[tokio::test]
    async fn catching_up_reads_the_file_to_its_end_before_answering() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        std::fs::write(&path, "").unwrap();
        let (mut feed, catch_up) = follow_file(&path, parse_sim_line).unwrap().into_parts();
        assert_eq!(catch_up.published().await, Some(0));
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        writeln!(file, "{}", line(7)).unwrap();
        writeln!(file, "{}", line(8)).unwrap();
        assert_eq!(catch_up.published().await, Some(8));
        let sent: Vec<u64> = std::iter::from_fn(|| feed.try_recv().ok())
            .map(|r| r.seq)
            .collect();
        assert_eq!(sent, [7, 8]);
    }

    /// A line as kube-apiserver writes it (Metadata level).
    fn kube_line(stage: &str, extra: &str) -> String {
        format!(
            r#"{{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"6c1f","stage":"{stage}","requestURI":"/apis/coordination.k8s.io/v1/namespaces/ops/leases/lock","verb":"update","user":{{"username":"system:serviceaccount:ops:op","uid":"u1","groups":["system:serviceaccounts","system:authenticated"]{extra}}},"sourceIPs":["172.18.0.3"],"userAgent":"memcached-operator","objectRef":{{"resource":"leases","namespace":"ops","name":"lock","apiGroup":"coordination.k8s.io","apiVersion":"v1"}},"responseStatus":{{"metadata":{{}},"code":200}},"requestReceivedTimestamp":"2026-01-01T00:00:01.123456Z","stageTimestamp":"2026-01-01T00:00:01.125000Z"}}"#
        )
    }

    const POD_EXTRA: &str = r#","extra":{"authentication.kubernetes.io/pod-name":["op-1"],"authentication.kubernetes.io/pod-uid":["uid-1"]}"#;

    #[test]
    fn a_kube_apiserver_event_names_its_pod_from_the_bound_token() {
        let ev = parse_kube_apiserver_line(
            &kube_line("ResponseComplete", POD_EXTRA),
            7,
            &HashMap::new(),
        )
        .unwrap();
        assert_eq!(ev.seq, 7);
        assert_eq!(ev.user, "system:serviceaccount:ops:op");
        assert_eq!(
            ev.pod,
            Some(PodRef {
                namespace: "ops".into(),
                name: "op-1".into(),
                uid: "uid-1".into()
            })
        );
        assert_eq!(
            (
                ev.verb.as_str(),
                ev.api_group.as_str(),
                ev.resource.as_str()
            ),
            ("update", "coordination.k8s.io", "leases")
        );
        assert_eq!(
            (ev.namespace.as_str(), ev.name.as_str(), ev.code),
            ("ops", "lock", 200)
        );
        assert!(ev.is_write());
        assert_eq!(ev.time.to_rfc3339(), "2026-01-01T00:00:01.123456+00:00");
    }

    #[test]
    fn without_token_claims_the_source_address_names_the_pod_and_only_completed_requests_count() {
        let pod = PodRef {
            namespace: "ops".into(),
            name: "op-2".into(),
            uid: "uid-2".into(),
        };
        let by_ip: HashMap<String, PodRef> = [("172.18.0.3".to_string(), pod.clone())].into();
        let ev = parse_kube_apiserver_line(&kube_line("ResponseComplete", ""), 1, &by_ip).unwrap();
        assert_eq!(ev.pod, Some(pod));
        assert!(parse_kube_apiserver_line(&kube_line("RequestReceived", ""), 1, &by_ip).is_none());
        assert!(parse_kube_apiserver_line(&kube_line("ResponseStarted", ""), 1, &by_ip).is_none());
        assert!(parse_kube_apiserver_line("{}", 1, &by_ip).is_none());
    }

    #[test]
    fn an_impersonated_request_is_the_impersonated_users() {
        let line = kube_line("ResponseComplete", "").replace(
            r#""sourceIPs""#,
            r#""impersonatedUser":{"username":"alice","groups":["devs"]},"sourceIPs""#,
        );
        let ev = parse_kube_apiserver_line(&line, 1, &HashMap::new()).unwrap();
        assert_eq!(ev.user, "alice");
    }

    #[test]
    fn either_format_is_read_and_kube_apiserver_events_are_numbered_from_one() {
        let mut parse = any_format_lines();
        assert_eq!(
            parse(&kube_line("RequestReceived", "")).map(|e| e.seq),
            None
        );
        assert_eq!(
            parse(&kube_line("ResponseComplete", "")).map(|e| e.seq),
            Some(1)
        );
        assert_eq!(parse(&line(40)).map(|e| e.seq), Some(40));
        assert_eq!(
            parse(&kube_line("ResponseComplete", "")).map(|e| e.seq),
            Some(2)
        );
    }

    #[test]
    fn a_missing_file_is_named_in_the_error() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let _guard = rt.enter();
        let e = follow_file(Path::new("/nonexistent/audit.jsonl"), parse_sim_line).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/audit.jsonl"), "{e}");
    }
}
