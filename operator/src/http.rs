//! The HTTP endpoints every replica serves, leader or standby: /metrics, /healthz, /readyz.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::leader::{HealthzAdaptor, Leadership, WriteGuard};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// Binding an endpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address could not be bound.
    #[error("failed to bind {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The leadership gauge as the write guard sees it.
///
/// With the write guard on, a lease leader whose last renewal was confirmed longer ago
/// than RenewDeadline reports 0 at once — e.g. right after waking from a freeze, before
/// its renew loop notices — so the gauge never claims what the guard would refuse. With
/// the guard off the gauge follows the elector alone, as client-go's does.
#[derive(Clone)]
pub struct LeaderGauge {
    /// This replica's leadership.
    pub leadership: Leadership,
    /// The guard reconcile writes go through.
    pub guard: WriteGuard,
}

impl std::fmt::Debug for LeaderGauge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderGauge")
            .field("leadership", &self.leadership)
            .finish_non_exhaustive()
    }
}

impl LeaderGauge {
    /// Whether to report this replica as the leader now.
    pub fn leading(&self) -> bool {
        if self.guard.is_off() {
            self.leadership.is_leading()
        } else {
            self.guard.check().is_ok()
        }
    }
}

/// What the handlers read.
#[derive(Clone, Debug)]
pub struct Endpoints {
    /// Rendered at /metrics.
    pub metrics: Metrics,
    /// Consulted by /healthz.
    pub healthz: HealthzAdaptor,
    /// Refreshes `leader_election_master_status` before each render (none without election).
    pub leader: Option<LeaderGauge>,
}

async fn metrics(State(e): State<Endpoints>) -> impl IntoResponse {
    if let Some(gauge) = &e.leader {
        e.metrics
            .set_leader(gauge.leadership.name(), gauge.leading());
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        e.metrics.render(),
    )
}

async fn healthz(State(e): State<Endpoints>) -> impl IntoResponse {
    match e.healthz.check() {
        Ok(()) => (StatusCode::OK, "ok".to_owned()),
        Err(msg) => {
            tracing::warn!(check = "leaderElection", reason = %msg, "healthz check failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("[-]leaderElection failed: {msg}\nhealthz check failed\n"),
            )
        }
    }
}

async fn readyz() -> &'static str {
    "ok"
}

/// All three routes.
pub fn router(endpoints: Endpoints) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(endpoints)
}

/// Bound listeners, ready to serve.
#[derive(Debug)]
pub struct Servers {
    listeners: Vec<TcpListener>,
    endpoints: Endpoints,
}

impl Servers {
    /// Binds the metrics and probe addresses (one listener when they are the same fixed address).
    ///
    /// # Errors
    /// [`Error::Bind`] naming the address.
    pub async fn bind(
        metrics_addr: SocketAddr,
        probe_addr: SocketAddr,
        endpoints: Endpoints,
    ) -> Result<Self, Error> {
        let mut addrs = vec![metrics_addr];
        if probe_addr != metrics_addr || probe_addr.port() == 0 {
            addrs.push(probe_addr);
        }
        let mut listeners = Vec::new();
        for addr in addrs {
            let l = TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Bind { addr, source })?;
            listeners.push(l);
        }
        Ok(Self {
            listeners,
            endpoints,
        })
    }

    /// The bound addresses (metrics first).
    #[must_use]
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// Serves every route on every listener until `shutdown`, in background tasks.
    pub fn spawn(self, shutdown: &Shutdown) {
        for listener in self.listeners {
            let app = router(self.endpoints.clone());
            let mut sd = shutdown.clone();
            tokio::spawn(async move {
                let addr = listener.local_addr().ok();
                if let Err(error) = axum::serve(listener, app)
                    .with_graceful_shutdown(async move { sd.wait().await })
                    .await
                {
                    tracing::error!(?addr, error = %error, "http server failed");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::leader::Leadership;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn request(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[test]
    fn a_lease_leader_past_its_renew_deadline_reports_the_gauge_as_zero_unless_the_guard_is_off() {
        let metrics = Metrics::new();
        let fake = FakeClock::new();
        let leadership = Leadership::new("lock", metrics.clone());
        leadership.start(fake.now());
        let clock: Arc<dyn Clock> = Arc::new(fake.clone());
        let guarded = LeaderGauge {
            leadership: leadership.clone(),
            guard: WriteGuard::leading(
                leadership.clone(),
                clock.clone(),
                Some(Duration::from_secs(3)),
            ),
        };
        let unguarded = LeaderGauge {
            leadership: leadership.clone(),
            guard: WriteGuard::off(),
        };
        assert!(guarded.leading() && unguarded.leading());
        fake.advance(Duration::from_secs(4));
        assert!(
            !guarded.leading(),
            "stale: the guard would refuse its writes"
        );
        assert!(
            unguarded.leading(),
            "guard off: the elector alone decides, as client-go"
        );
        leadership.confirm(clock.now());
        assert!(guarded.leading(), "a renewal confirms it again");
    }

    #[tokio::test]
    async fn a_replica_serves_metrics_healthz_and_readyz_and_a_stale_leader_fails_healthz() {
        let metrics = Metrics::new();
        let clock = FakeClock::new();
        let leadership = Leadership::new("lock", metrics.clone());
        let healthz = HealthzAdaptor::lease(
            leadership.clone(),
            Arc::new(clock.clone()),
            Duration::from_secs(15),
            Duration::from_secs(20),
        );
        let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let servers = Servers::bind(
            loopback,
            "127.0.0.1:0".parse().unwrap(),
            Endpoints {
                metrics,
                healthz,
                leader: None,
            },
        )
        .await
        .unwrap();
        let addrs = servers.local_addrs();
        assert_eq!(addrs.len(), 2);
        let (_trigger, shutdown) = crate::shutdown::channel();
        servers.spawn(&shutdown);

        let m = request(addrs[0], "/metrics").await;
        assert!(m.starts_with("HTTP/1.1 200"), "{m}");
        assert!(
            m.contains("leader_election_master_status{name=\"lock\"} 0"),
            "{m}"
        );
        assert!(
            request(addrs[1], "/readyz")
                .await
                .starts_with("HTTP/1.1 200")
        );
        assert!(
            request(addrs[1], "/healthz")
                .await
                .starts_with("HTTP/1.1 200")
        );

        leadership.start(clock.now());
        clock.advance(Duration::from_secs(36));
        let h = request(addrs[1], "/healthz").await;
        assert!(h.starts_with("HTTP/1.1 500"), "{h}");
        assert!(
            h.contains("failed election to renew leadership on lease lock"),
            "{h}"
        );
        assert!(
            request(addrs[1], "/readyz")
                .await
                .starts_with("HTTP/1.1 200"),
            "standbys and leaders stay ready"
        );
    }
}
