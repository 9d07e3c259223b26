//! Waiting in steps: until a condition holds within a bound, or that it holds throughout
//! a span. Every waiting step says what it expected and what it last observed.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is looked at again.
const POLL: Duration = Duration::from_millis(100);

/// Polls `probe` until it answers `Ok`, at most for `within`; on timeout the step fails
/// with `what` was expected and the probe's last answer (what it observed).
///
/// # Panics
/// On timeout.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + within;
    let mut last = String::from("nothing yet: the first look did not finish");
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, probe()).await {
            Ok(Ok(value)) => return value,
            Ok(Err(observed)) => last = observed,
            Err(_) => {}
        }
        if Instant::now() >= deadline {
            panic!("expected within {within:?}: {what}; last observed: {last}");
        }
        tokio::time::sleep(POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

/// Checks `probe` again and again for `span` (the step's meaning is "for this long"); the
/// step fails at the first answer that is not `Ok`, with `what` was expected and what was
/// observed, or when a look gets no answer within the span (at least 5 s).
///
/// # Panics
/// At the first violation.
pub async fn throughout<F, Fut>(span: Duration, what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let begin = Instant::now();
    let patience = span.max(Duration::from_secs(5));
    loop {
        match tokio::time::timeout(patience, probe()).await {
            Ok(Ok(())) => {}
            Ok(Err(observed)) => panic!(
                "expected for {span:?}: {what}; after {:?} observed: {observed}",
                begin.elapsed()
            ),
            Err(_) => panic!(
                "expected for {span:?}: {what}; after {:?} a look got no answer within {patience:?}",
                begin.elapsed()
            ),
        }
        if begin.elapsed() >= span {
            return;
        }
        tokio::time::sleep(POLL.min(span.saturating_sub(begin.elapsed()))).await;
    }
}
