//! What the streaming subresources (`pods/exec`, `pods/portforward`) and the kubelet's
//! streaming endpoints share about upgrading a connection: the WebSocket handshake over a
//! list of subprotocols, the negotiation of a SPDY stream protocol
//! (`X-Stream-Protocol-Version`, as `httpstream.Handshake` negotiates it), the
//! `101 Switching Protocols` answer that hands the upgraded connection on, and the pod a
//! stream is for (stored, and bound to a node).
//!
//! # Caveats
//! The answer's body type is hyper's [`Empty`]: callers box it into their own body type.

use std::future::Future;

use bytes::Bytes;
use http_body_util::Empty;
use hyper::header::{
    CONNECTION, HeaderName, HeaderValue, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY,
    SEC_WEBSOCKET_PROTOCOL, UPGRADE,
};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper::{HeaderMap, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use super::status::{ApiError, GroupResource};

/// The header naming SPDY stream protocols, offered by the client and chosen by the server.
pub const STREAM_PROTOCOL_HEADER: &str = "x-stream-protocol-version";

/// The values of header `name`: every occurrence split at commas, trimmed, lower-cased,
/// empty ones dropped.
pub fn header_values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty())
        .collect()
}

/// Whether the request asks to upgrade its connection (`Connection: Upgrade`).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    header_values(headers, CONNECTION.as_str())
        .iter()
        .any(|v| v == "upgrade")
}

/// For a WebSocket upgrade offering one of `protocols`: the first of `protocols` (the
/// server's preference) the client offers, and the `Sec-WebSocket-Accept` to answer with.
/// `None` when the request is no WebSocket upgrade, has no key, or offers none of them.
pub fn websocket(
    headers: &HeaderMap,
    protocols: &[&'static str],
) -> Option<(&'static str, String)> {
    let upgrade = header_values(headers, UPGRADE.as_str())
        .iter()
        .any(|v| v == "websocket");
    if !(upgrade && is_upgrade(headers)) {
        return None;
    }
    let key = headers.get(SEC_WEBSOCKET_KEY)?.as_bytes();
    let offered = header_values(headers, SEC_WEBSOCKET_PROTOCOL.as_str());
    let protocol = protocols
        .iter()
        .find(|p| offered.iter().any(|o| o.eq_ignore_ascii_case(p)))?;
    Some((
        protocol,
        tokio_tungstenite::tungstenite::handshake::derive_accept_key(key),
    ))
}

/// The SPDY stream protocol of a request: the first the client offers in
/// `X-Stream-Protocol-Version` that the server accepts (`server`).
///
/// # Errors
/// 400 when the client offers none, 403 when none of its offers is accepted (the messages
/// of `httpstream.Handshake`).
pub fn stream_protocol(
    headers: &HeaderMap,
    server: &[&'static str],
) -> Result<&'static str, ApiError> {
    let offered = header_values(headers, STREAM_PROTOCOL_HEADER);
    if offered.is_empty() {
        return Err(ApiError::BadRequest(
            "unable to upgrade: X-Stream-Protocol-Version is required".into(),
        ));
    }
    offered
        .iter()
        .find_map(|o| server.iter().find(|s| s.eq_ignore_ascii_case(o)).copied())
        .ok_or_else(|| ApiError::Custom {
            code: 403,
            reason: "Forbidden".into(),
            message: format!(
                "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, \
                 server accepts {server:?}"
            ),
        })
}

/// A SPDY/3.1 upgrade (`Upgrade: SPDY/3.1`, `Connection: Upgrade`).
pub fn is_spdy(headers: &HeaderMap) -> bool {
    is_upgrade(headers)
        && header_values(headers, UPGRADE.as_str())
            .iter()
            .any(|v| v == "spdy/3.1")
}

/// How an upgrade is answered: the headers of the `101`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Switch {
    /// A WebSocket with this subprotocol and `Sec-WebSocket-Accept`.
    WebSocket {
        /// The subprotocol chosen (empty: none).
        protocol: &'static str,
        /// `Sec-WebSocket-Accept`.
        accept_key: String,
    },
    /// SPDY/3.1 with this stream protocol (`X-Stream-Protocol-Version`).
    Spdy(&'static str),
}

/// `101 Switching Protocols` with the headers of `switch`; once the connection is upgraded
/// `serve` runs on it (in a task of its own). Without an upgrade (the client went away)
/// `serve` never runs.
pub fn switching_protocols<F, Fut>(
    upgrade: Option<OnUpgrade>,
    switch: &Switch,
    serve: F,
) -> Response<Empty<Bytes>>
where
    F: FnOnce(TokioIo<Upgraded>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut resp = Response::new(Empty::new());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = resp.headers_mut();
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    let fixed = |value: &'static str| HeaderValue::from_static(value);
    match switch {
        Switch::WebSocket {
            protocol,
            accept_key,
        } => {
            headers.insert(UPGRADE, fixed("websocket"));
            // None chosen (the client offered none): none named.
            if !protocol.is_empty() {
                headers.insert(SEC_WEBSOCKET_PROTOCOL, fixed(protocol));
            }
            if let Ok(key) = HeaderValue::from_str(accept_key) {
                headers.insert(SEC_WEBSOCKET_ACCEPT, key);
            }
        }
        Switch::Spdy(protocol) => {
            headers.insert(UPGRADE, fixed("SPDY/3.1"));
            headers.insert(
                HeaderName::from_static(STREAM_PROTOCOL_HEADER),
                fixed(protocol),
            );
        }
    }
    tokio::spawn(async move {
        if let Some(Ok(upgraded)) = match upgrade {
            Some(on) => Some(on.await),
            None => None,
        } {
            serve(TokioIo::new(upgraded)).await;
        }
    });
    resp
}

/// The stored pod `name` a stream is for, once bound to a node.
///
/// # Errors
/// 404 when there is no such pod, 400 when no node runs it (`does not have a host
/// assigned`, as kube-apiserver says).
pub fn scheduled_pod(stored: Option<Value>, name: &str) -> Result<Value, ApiError> {
    let gr = GroupResource::new("", "pods");
    let pod = stored.ok_or_else(|| ApiError::not_found(&gr, name))?;
    if pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .is_empty()
    {
        return Err(ApiError::BadRequest(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    Ok(pod)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Headers of `(name, value)` pairs, in order.
    pub(crate) fn with(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn the_websocket_handshake_takes_the_servers_preferred_protocol_with_the_rfc_6455_key() {
        let headers = with(&[
            ("upgrade", "websocket"),
            ("connection", "Upgrade"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            (
                "sec-websocket-protocol",
                "v4.channel.k8s.io, v5.channel.k8s.io",
            ),
        ]);
        assert_eq!(
            websocket(&headers, &["v5.channel.k8s.io", "v4.channel.k8s.io"]),
            Some((
                "v5.channel.k8s.io",
                "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".to_string()
            ))
        );
        assert_eq!(websocket(&headers, &["channel.k8s.io"]), None);
        assert_eq!(websocket(&HeaderMap::new(), &["v4.channel.k8s.io"]), None);
    }

    #[test]
    fn the_stream_protocol_is_the_clients_first_accepted_offer_or_a_400_or_a_403() {
        let offered = with(&[(
            "x-stream-protocol-version",
            "v5.channel.k8s.io, v4.channel.k8s.io",
        )]);
        assert_eq!(
            stream_protocol(&offered, &["v4.channel.k8s.io", "v5.channel.k8s.io"]).ok(),
            Some("v5.channel.k8s.io")
        );
        assert!(matches!(
            stream_protocol(&offered, &["portforward.k8s.io"]),
            Err(ApiError::Custom { code: 403, .. })
        ));
        assert!(matches!(
            stream_protocol(&HeaderMap::new(), &["portforward.k8s.io"]),
            Err(ApiError::BadRequest(_))
        ));
    }

    #[test]
    fn a_pod_without_a_node_has_no_host_assigned() {
        let pending = serde_json::json!({"metadata": {"name": "p"}, "spec": {}});
        assert!(matches!(
            scheduled_pod(Some(pending), "p"),
            Err(ApiError::BadRequest(m)) if m == "pod p does not have a host assigned"
        ));
        assert!(matches!(
            scheduled_pod(None, "p"),
            Err(ApiError::NotFound { .. })
        ));
    }
}
