//! Command-line flags (clap) and the duration syntax they use.
//!
//! Exit codes of the binary: 0 clean shutdown, 1 runtime failure (including lost
//! leadership), 2 bad flags or configuration (clap's own usage errors are 2 as well).

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::leader::{StandbyMode, WriteGuardMode};

/// Which leader election to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ElectionMode {
    /// Leader-for-life: a ConfigMap lock owned by the leader Pod (operator-sdk's default).
    ForLife,
    /// Leader-with-lease: a coordination.k8s.io/v1 Lease with client-go's algorithm.
    Lease,
    /// No election: every replica reconciles.
    None,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// memcached-operator: reconciles Memcached (cache.example.com/v1alpha1) into memcached Deployments.
#[derive(Debug, Clone, Parser)]
#[command(name = "memcached-operator", version, about, long_about = None)]
pub struct Args {
    /// Leader election mode: for-life (ConfigMap owned by the leader pod), lease (coordination.k8s.io Lease), or none.
    #[arg(long, value_enum, default_value = "for-life")]
    pub leader_election: ElectionMode,

    /// Name of the lock: the ConfigMap (for-life) or the Lease (lease).
    #[arg(long, default_value = "memcached-operator-lock")]
    pub leader_election_id: String,

    /// Namespace of the lock [default: POD_NAMESPACE, else the service-account namespace file].
    #[arg(long)]
    pub leader_election_namespace: Option<String>,

    /// lease: how long standbys wait after observing a renewal before taking over.
    #[arg(long, value_parser = parse_duration, default_value = "15s")]
    pub lease_duration: Duration,

    /// lease: a leader that has not renewed for this long steps down and exits non-zero.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub renew_deadline: Duration,

    /// lease: time between acquire and renew tries.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pub retry_period: Duration,

    /// lease: on SIGTERM, give the lease up (only if a fresh read shows we still hold it).
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub release_on_cancel: bool,

    /// How a standby waits: watch the lock (react at once) or poll as client-go / operator-lib do.
    #[arg(long, value_enum, default_value = "watch")]
    pub standby: StandbyMode,

    /// Refuse reconcile writes unless leadership was confirmed within the renew deadline (off reproduces the anchors).
    #[arg(long, value_enum, default_value = "on")]
    pub write_guard: WriteGuardMode,

    /// Address of the Prometheus /metrics endpoint.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_bind_address: SocketAddr,

    /// Address of the /healthz and /readyz endpoints.
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub health_probe_bind_address: SocketAddr,

    /// Namespaces to watch: empty for all, one name, or a comma-separated set watched together.
    #[arg(long, env = "WATCH_NAMESPACE", default_value = "")]
    pub watch_namespace: String,

    /// Reconciles run at once (per watched namespace).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_reconciles: u16,

    /// Reconcile every Memcached again this long after each successful reconcile (e.g. 10m).
    #[arg(long, value_parser = parse_duration)]
    pub resync_period: Option<Duration>,

    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

/// Parses Go-style durations: `15s`, `500ms`, `1m30s`, `1.5s`, `2h`, `0s`.
///
/// # Errors
/// A message saying what is wrong with `s`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err("durations cannot be negative".into());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(format!(
                "invalid duration {s:?}: expected a number, e.g. 15s, 500ms, 1m30s"
            ));
        }
        let (num, tail) = rest.split_at(num_len);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("invalid number {num:?} in duration {s:?}"))?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => {
                return Err(format!(
                    "missing unit in duration {s:?}: use ns, us, ms, s, m or h"
                ));
            }
            other => {
                return Err(format!(
                    "unknown unit {other:?} in duration {s:?}: use ns, us, ms, s, m or h"
                ));
            }
        };
        total += value * scale;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("5 parsecs").is_err());
    }

    #[test]
    fn the_defaults_are_controller_runtimes_and_operator_sdks() {
        let a = Args::try_parse_from(["memcached-operator"]).unwrap();
        assert_eq!(a.leader_election, ElectionMode::ForLife);
        assert_eq!(a.leader_election_id, "memcached-operator-lock");
        assert_eq!(
            (a.lease_duration, a.renew_deadline, a.retry_period),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
        assert!(!a.release_on_cancel);
        assert_eq!(a.standby, StandbyMode::Watch);
        assert_eq!(a.write_guard, WriteGuardMode::On);
        assert_eq!(a.metrics_bind_address.to_string(), "0.0.0.0:8080");
        assert_eq!(a.health_probe_bind_address.to_string(), "0.0.0.0:8081");
        assert_eq!(a.max_concurrent_reconciles, 1);
        assert_eq!(a.resync_period, None);
    }

    #[test]
    fn release_on_cancel_is_a_switch_that_also_takes_a_value() {
        let a = Args::try_parse_from(["x", "--release-on-cancel"]).unwrap();
        assert!(a.release_on_cancel);
        let a = Args::try_parse_from(["x", "--release-on-cancel=false"]).unwrap();
        assert!(!a.release_on_cancel);
    }

    #[test]
    fn the_command_definition_is_consistent() {
        Args::command().debug_assert();
    }
}
