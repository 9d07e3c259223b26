//! A gRPC health service for the kubelet's `grpc` probes: `grpc.health.v1.Health/Check`
//! over cleartext HTTP/2, answering `SERVING` while a check holds and `NOT_SERVING`
//! otherwise, whatever service is asked for.

use std::convert::Infallible;

use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// `HealthCheckResponse.ServingStatus` values.
const SERVING: u8 = 1;
const NOT_SERVING: u8 = 2;

/// A `HealthCheckResponse` whose `status` (field 1, a varint) is `status`, behind gRPC's
/// length prefix (uncompressed, 2 bytes).
fn response(status: u8) -> Bytes {
    Bytes::from(vec![0, 0, 0, 0, 2, 0x08, status])
}

/// Serves the health service on `listener` until the task is dropped or the runtime
/// ends: each call answers `SERVING` when `serving()` holds at that moment.
pub fn serve(
    listener: TcpListener,
    serving: impl Fn() -> bool + Clone + Send + Sync + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let serving = serving.clone();
            let check =
                hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let status = if serving() { SERVING } else { NOT_SERVING };
                    async move {
                        let _ = request.into_body().collect().await;
                        let mut trailers = http::HeaderMap::new();
                        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                        let frames = [Frame::data(response(status)), Frame::trailers(trailers)];
                        let body =
                            StreamBody::new(futures::stream::iter(frames.map(Ok::<_, Infallible>)));
                        http::Response::builder()
                            .header("content-type", "application/grpc")
                            .body(body)
                    }
                });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), check),
            );
        }
    })
}
