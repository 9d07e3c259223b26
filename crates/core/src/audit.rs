//! The audit the harness reads, whatever the provider: one [`AuditRecord`] per request an
//! API server answered (who sent it, from which pod, what it did, how it was answered), and
//! an [`AuditFeed`] that streams them live and can be caught up with. Each provider turns
//! its API server's own audit into records: the simulator's in-memory log, kube-apiserver's
//! JSON log file on `local` and kind, an audit file on any cluster.
//!
//! Catching up is what makes a check after a wait exact: once a step has seen the effect of
//! a request (an object gone, a status set), [`AuditCatchUp::published`] names the last
//! record its API server had audited by then, so the recorder can wait for that one
//! instead of hoping the feed kept pace.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc, oneshot};

pub use cluster_vocabulary::PodRef;

/// One audited request: what the checks need of it. Its JSON form (camelCase fields) reads
/// the lines `opconform sim --audit-log` writes, which carry more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// When the API server received the request.
    pub time: DateTime<Utc>,
    /// Its sequence number in its feed (increasing, from 1).
    pub seq: u64,
    /// The user, after impersonation.
    pub user: String,
    /// The pod the request came from, when known (from its token or its address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodRef>,
    /// The RBAC verb (get, list, watch, create, update, patch, delete, deletecollection).
    pub verb: String,
    /// API group.
    pub api_group: String,
    /// Plural resource (empty for non-resource paths).
    pub resource: String,
    /// Subresource.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    /// Namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Object name (kube-apiserver leaves it empty for a create).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// HTTP status code of the response.
    pub code: u16,
}

impl AuditRecord {
    /// Whether the request could change state (create, update, patch, delete,
    /// deletecollection). The create of a review (TokenReview, SubjectAccessReview and
    /// their kin) is not one: it asks the API server a question and stores nothing, as every
    /// replica's metrics filter does to check a scraper's token.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        ) && !self.is_review()
    }

    /// Whether it is the create of a review, answered and not stored.
    fn is_review(&self) -> bool {
        matches!(
            (self.api_group.as_str(), self.resource.as_str()),
            (
                "authentication.k8s.io",
                "tokenreviews" | "selfsubjectreviews"
            ) | (
                "authorization.k8s.io",
                "subjectaccessreviews"
                    | "selfsubjectaccessreviews"
                    | "localsubjectaccessreviews"
                    | "selfsubjectrulesreviews"
            )
        )
    }
}

/// A request to read the source to its end, answered with the last `seq` published.
pub type CatchUpRequest = oneshot::Sender<u64>;

/// How a feed learns how far its source has got.
#[derive(Clone)]
enum Source {
    /// The source numbers its records as it makes them; this reads its latest number.
    Counted(Arc<dyn Fn() -> u64 + Send + Sync>),
    /// A follower reads the source to its end when asked, and answers with the last
    /// `seq` it published.
    Followed(mpsc::Sender<CatchUpRequest>),
}

/// The live audit of one API server: records from now on, and a way to catch up.
pub struct AuditFeed {
    records: broadcast::Receiver<AuditRecord>,
    catch_up: AuditCatchUp,
}

impl AuditFeed {
    /// A feed of `records` whose source numbers them as it makes them: `last_seq` reads the
    /// `seq` of the latest record made (0 before the first).
    pub fn counted(
        records: broadcast::Receiver<AuditRecord>,
        last_seq: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> AuditFeed {
        AuditFeed {
            records,
            catch_up: AuditCatchUp(Source::Counted(Arc::new(last_seq))),
        }
    }

    /// A feed of `records` published by a follower that answers a [`CatchUpRequest`] on
    /// `asks` once it has read its source to the end.
    pub fn followed(
        records: broadcast::Receiver<AuditRecord>,
        asks: mpsc::Sender<CatchUpRequest>,
    ) -> AuditFeed {
        AuditFeed {
            records,
            catch_up: AuditCatchUp(Source::Followed(asks)),
        }
    }

    /// The records and the way to catch up with them, apart.
    pub fn into_parts(self) -> (broadcast::Receiver<AuditRecord>, AuditCatchUp) {
        (self.records, self.catch_up)
    }
}

impl std::fmt::Debug for AuditFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditFeed").finish_non_exhaustive()
    }
}

/// Asks a feed's source how far it has got.
#[derive(Clone)]
pub struct AuditCatchUp(Source);

impl AuditCatchUp {
    /// The `seq` of the last record the source had published by now (0 before the first),
    /// after reading it to its end: every request the API server had answered before this
    /// call is at or below it (the API server audits a request before it answers). `None`
    /// when the source is gone.
    pub async fn published(&self) -> Option<u64> {
        match &self.0 {
            Source::Counted(last_seq) => Some(last_seq()),
            Source::Followed(asks) => {
                let (answer, answered) = oneshot::channel();
                asks.send(answer).await.ok()?;
                answered.await.ok()
            }
        }
    }
}

impl std::fmt::Debug for AuditCatchUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Source::Counted(_) => "AuditCatchUp(counted)",
            Source::Followed(_) => "AuditCatchUp(followed)",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(verb: &str, api_group: &str, resource: &str) -> AuditRecord {
        AuditRecord {
            time: Utc::now(),
            seq: 1,
            user: "u".into(),
            pod: None,
            verb: verb.into(),
            api_group: api_group.into(),
            resource: resource.into(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
            code: 201,
        }
    }

    #[test]
    fn a_review_asks_a_question_and_is_no_write_while_other_creates_are() {
        assert!(!record("create", "authentication.k8s.io", "tokenreviews").is_write());
        assert!(!record("create", "authorization.k8s.io", "subjectaccessreviews").is_write());
        assert!(record("create", "apps", "deployments").is_write());
        assert!(record("patch", "", "configmaps").is_write());
        assert!(!record("get", "apps", "deployments").is_write());
    }

    #[tokio::test]
    async fn a_counted_feed_publishes_what_its_source_counts() {
        let (_tx, rx) = broadcast::channel(4);
        let count = Arc::new(std::sync::atomic::AtomicU64::new(3));
        let read = count.clone();
        let (_, catch_up) =
            AuditFeed::counted(rx, move || read.load(std::sync::atomic::Ordering::SeqCst))
                .into_parts();
        assert_eq!(catch_up.published().await, Some(3));
        count.store(5, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(catch_up.published().await, Some(5));
    }

    #[tokio::test]
    async fn a_followed_feed_whose_follower_is_gone_publishes_nothing() {
        let (_tx, rx) = broadcast::channel(4);
        let (asks, answers) = mpsc::channel(1);
        drop(answers);
        let (_, catch_up) = AuditFeed::followed(rx, asks).into_parts();
        assert_eq!(catch_up.published().await, None);
    }
}
