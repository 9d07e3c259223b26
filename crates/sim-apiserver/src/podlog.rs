//! `GET …/pods/NAME/log`: the `PodLogOptions` of the query (`container`, `follow`,
//! `previous`, `timestamps`, `tailLines`, `sinceSeconds`, `sinceTime`, `limitBytes`;
//! `insecureSkipTLSVerifyBackend` is accepted and has no effect here), parsed and validated
//! as kube-apiserver does; the container named, or the pod's only one, checked against the
//! pod's spec; and the seam the kubelets' logs are read through, [`LogSource`].
//!
//! A source answers what the log holds now, selected and formatted by the options, and
//! with `follow` the output written later, as it is written, until the container instance
//! ends: the server streams that answer (chunked) until then, until the client goes away
//! or until the server stops.

use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_stream::Stream;

use super::names::Cause;
use super::request::Query;
use super::status::{ApiError, GroupResource};

/// The options of one `pods/log` read, as the kubelet gets them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// The container asked for (`container`); empty for the pod's only container.
    pub container: String,
    /// Keep the answer open and stream what is written later.
    pub follow: bool,
    /// Read the instance before the last restart.
    pub previous: bool,
    /// Begin each line with the RFC3339 time (nanoseconds) it was written.
    pub timestamps: bool,
    /// Only the last lines (`tailLines`).
    pub tail_lines: Option<u64>,
    /// Only lines written in the last seconds (`sinceSeconds`).
    pub since_seconds: Option<i64>,
    /// Only lines written at or after this time (`sinceTime`).
    pub since_time: Option<DateTime<Utc>>,
    /// Stop after this many bytes (`limitBytes`).
    pub limit_bytes: Option<u64>,
}

impl LogOptions {
    /// The options of `query` for the pod `pod`.
    ///
    /// # Errors
    /// `BadRequest` for a value that does not parse (as the parameter codec refuses it),
    /// `Invalid` (`PodLogOptions "pod" is invalid: …`) for values kube-apiserver's
    /// `ValidatePodLogOptions` refuses.
    pub fn parse(query: &Query, pod: &str) -> Result<Self, ApiError> {
        let options = Self {
            container: query.str("container").to_string(),
            follow: parse_bool(query.get("follow"))?,
            previous: parse_bool(query.get("previous"))?,
            timestamps: parse_bool(query.get("timestamps"))?,
            tail_lines: None,
            since_seconds: parse_int(query.get("sinceSeconds"))?,
            since_time: match query.get("sinceTime") {
                Some(text) => Some(parse_time(text)?),
                None => None,
            },
            limit_bytes: None,
        };
        parse_bool(query.get("insecureSkipTLSVerifyBackend"))?;
        let tail_lines = parse_int(query.get("tailLines"))?;
        let limit_bytes = parse_int(query.get("limitBytes"))?;
        let mut causes = Vec::new();
        if let Some(n) = tail_lines.filter(|n| *n < 0) {
            causes.push(Cause::invalid(
                "tailLines",
                Value::from(n),
                "must be greater than or equal to 0",
            ));
        }
        if let Some(n) = limit_bytes.filter(|n| *n < 1) {
            causes.push(Cause::invalid(
                "limitBytes",
                Value::from(n),
                "must be greater than 0",
            ));
        }
        match (options.since_seconds, options.since_time) {
            (Some(_), Some(_)) => causes.push(Cause::forbidden(
                "",
                "at most one of `sinceTime` or `sinceSeconds` may be specified",
            )),
            (Some(n), None) if n < 1 => causes.push(Cause::invalid(
                "sinceSeconds",
                Value::from(n),
                "must be greater than 0",
            )),
            _ => {}
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid("PodLogOptions", "", pod, causes));
        }
        Ok(Self {
            tail_lines: tail_lines.and_then(|n| u64::try_from(n).ok()),
            limit_bytes: limit_bytes.and_then(|n| u64::try_from(n).ok()),
            ..options
        })
    }

    /// The earliest time of a line to answer, as the kubelet reckons it at `now`.
    pub fn since(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match (self.since_time, self.since_seconds) {
            (Some(time), _) => Some(time),
            (None, Some(seconds)) => Some(now - chrono::Duration::seconds(seconds)),
            (None, None) => None,
        }
    }
}

/// `strconv.ParseBool`, absent being `false`.
fn parse_bool(value: Option<&str>) -> Result<bool, ApiError> {
    match value {
        None | Some("") => Ok(false),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
        Some(other) => Err(ApiError::BadRequest(format!(
            "strconv.ParseBool: parsing {other:?}: invalid syntax"
        ))),
    }
}

/// `strconv.ParseInt(_, 10, 64)`.
fn parse_int(value: Option<&str>) -> Result<Option<i64>, ApiError> {
    match value {
        None | Some("") => Ok(None),
        Some(text) => text.parse().map(Some).map_err(|_| {
            ApiError::BadRequest(format!(
                "strconv.ParseInt: parsing {text:?}: invalid syntax"
            ))
        }),
    }
}

/// A `metav1.Time` query value: RFC3339.
fn parse_time(text: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            ApiError::BadRequest(format!(
                "parsing time {text:?} as \"2006-01-02T15:04:05Z07:00\": cannot parse {text:?} as \"2006\""
            ))
        })
}

/// The later output of a followed log, chunk by chunk.
pub type LogTail = Pin<Box<dyn Stream<Item = Bytes> + Send>>;

/// A container's log as a source answers a read.
pub struct LogStream {
    /// What the log holds now, selected and formatted by the options.
    pub head: Bytes,
    /// With `follow`: what is written later, as it is written; it ends when the container
    /// instance ends or `limitBytes` is reached. `None`: the answer is `head` alone.
    pub rest: Option<LogTail>,
}

impl LogStream {
    /// An answer of `head` alone.
    pub fn done(head: impl Into<Bytes>) -> Self {
        Self {
            head: head.into(),
            rest: None,
        }
    }
}

/// One read of a container's log.
#[derive(Debug, Clone, Copy)]
pub struct LogRequest<'a> {
    /// The pod's namespace.
    pub namespace: &'a str,
    /// The pod's name.
    pub pod: &'a str,
    /// The container (resolved: never empty).
    pub container: &'a str,
    /// What to read.
    pub options: &'a LogOptions,
}

/// Why a source cannot answer a read (its message is the kubelet's, answered as 400).
pub type LogRefusal = Box<dyn std::error::Error + Send + Sync>;

/// Reads a container's log: `None` when the pod is not this source's (another kubelet's).
pub type LogSource =
    Arc<dyn Fn(&LogRequest<'_>) -> Option<Result<LogStream, LogRefusal>> + Send + Sync>;

/// The container a read is for: the one named, which must be one of the pod's (init,
/// app or ephemeral), or the pod's only app container.
///
/// # Errors
/// `BadRequest` with kube-apiserver's messages when no container is named and the pod has
/// several (or none), or when the named one is not the pod's.
pub fn container_of(pod: &Value, name: &str, requested: &str) -> Result<String, ApiError> {
    let spec = &pod["spec"];
    let names = |key: &str| -> Vec<String> {
        spec[key]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let apps = names("containers");
    let all: Vec<String> = names("initContainers")
        .into_iter()
        .chain(apps.iter().cloned())
        .chain(names("ephemeralContainers"))
        .collect();
    if requested.is_empty() {
        return match apps.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(ApiError::BadRequest(format!(
                "a container name must be specified for pod {name}"
            ))),
            _ => Err(ApiError::BadRequest(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                all.join(" ")
            ))),
        };
    }
    if all.iter().any(|c| c == requested) {
        Ok(requested.to_string())
    } else {
        Err(ApiError::BadRequest(format!(
            "container {requested} is not valid for pod {name}"
        )))
    }
}

/// Answers `GET …/pods/NAME/log` for `stored`, the pod as stored, from the kubelet that
/// runs it (`read_log`: whichever kubelet's [`LogSource`] answers).
///
/// # Errors
/// Invalid options, a pod that does not exist, a container that cannot be chosen, or the
/// kubelet's refusal (e.g. no previous instance), as kube-apiserver answers them.
pub fn read(
    stored: Option<Value>,
    namespace: &str,
    pod: &str,
    query: &Query,
    read_log: impl FnOnce(&LogRequest<'_>) -> Option<Result<LogStream, LogRefusal>>,
) -> Result<LogStream, ApiError> {
    let options = LogOptions::parse(query, pod)?;
    let gr = GroupResource::new("", "pods");
    let object = stored.ok_or_else(|| ApiError::not_found(&gr, pod))?;
    let container = container_of(&object, pod, &options.container)?;
    if object["spec"]["nodeName"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        // kube-apiserver has no kubelet to ask yet and answers nothing.
        return Ok(LogStream::done(Bytes::new()));
    }
    let request = LogRequest {
        namespace,
        pod,
        container: &container,
        options: &options,
    };
    match read_log(&request) {
        Some(Ok(stream)) => Ok(stream),
        Some(Err(refusal)) => Err(ApiError::BadRequest(refusal.to_string())),
        None => Err(ApiError::BadRequest(format!(
            "container {container:?} in pod {pod:?} is waiting to start: ContainerCreating"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn query(q: &str) -> Query {
        Query::parse(Some(q))
    }

    #[test]
    fn every_option_kubectl_sends_is_read() {
        let options = LogOptions::parse(
            &query("container=c&follow=true&previous=1&timestamps=true&tailLines=10&sinceSeconds=5&limitBytes=100&insecureSkipTLSVerifyBackend=true"),
            "p",
        )
        .unwrap();
        assert_eq!(
            options,
            LogOptions {
                container: "c".into(),
                follow: true,
                previous: true,
                timestamps: true,
                tail_lines: Some(10),
                since_seconds: Some(5),
                since_time: None,
                limit_bytes: Some(100),
            }
        );
        let since = LogOptions::parse(&query("sinceTime=2026-11-29T12:00:00Z"), "p").unwrap();
        assert_eq!(
            since.since(Utc::now()).unwrap().to_rfc3339(),
            "2026-11-29T12:00:00+00:00"
        );
    }

    #[test]
    fn invalid_options_get_kube_apiservers_messages() {
        let message = |q: &str| LogOptions::parse(&query(q), "p").unwrap_err().to_string();
        assert_eq!(
            message("sinceSeconds=5&sinceTime=2026-11-29T12:00:00Z"),
            "PodLogOptions \"p\" is invalid: : Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
        );
        assert_eq!(
            message("tailLines=-1&limitBytes=0"),
            "PodLogOptions \"p\" is invalid: [tailLines: Invalid value: -1: must be greater than or equal to 0, limitBytes: Invalid value: 0: must be greater than 0]"
        );
        assert_eq!(
            message("sinceSeconds=0"),
            "PodLogOptions \"p\" is invalid: sinceSeconds: Invalid value: 0: must be greater than 0"
        );
        let e = LogOptions::parse(&query("tailLines=x"), "p").unwrap_err();
        assert_eq!(e.code(), 400);
        assert_eq!(
            e.to_string(),
            "strconv.ParseInt: parsing \"x\": invalid syntax"
        );
        assert_eq!(
            LogOptions::parse(&query("tailLines=-1"), "p")
                .unwrap_err()
                .code(),
            422
        );
    }

    #[test]
    fn the_container_is_the_named_one_or_the_only_one() {
        let one = json!({"spec": {"containers": [{"name": "app"}]}});
        assert_eq!(container_of(&one, "p", "").unwrap(), "app");
        let two = json!({"spec": {
            "initContainers": [{"name": "setup"}],
            "containers": [{"name": "a"}, {"name": "b"}],
        }});
        assert_eq!(
            container_of(&two, "p", "").unwrap_err().to_string(),
            "a container name must be specified for pod p, choose one of: [setup a b]"
        );
        assert_eq!(container_of(&two, "p", "setup").unwrap(), "setup");
        assert_eq!(
            container_of(&two, "p", "c").unwrap_err().to_string(),
            "container c is not valid for pod p"
        );
    }
}
