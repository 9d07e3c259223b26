//! Waiting in steps: until a condition holds within a bound, or that it holds throughout
//! a span. Every waiting step says what it expected and what it last observed.

use std::future::Future;
use std::time::{Duration, Instant};

use super::StepError;

/// How often a condition is looked at again.
const POLL: Duration = Duration::from_millis(100);

/// Polls `probe` until it answers `Ok`, at most for `within`.
///
/// # Errors
/// [`StepError::NotWithin`] on timeout, with `what` was expected and the probe's last
/// answer (what it observed).
pub async fn eventually<T, F, Fut>(
    within: Duration,
    what: &str,
    mut probe: F,
) -> Result<T, StepError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + within;
    let mut last = String::from("nothing yet: the first look did not finish");
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, probe()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(observed)) => last = observed,
            Err(_) => {}
        }
        if Instant::now() >= deadline {
            return Err(StepError::NotWithin {
                within,
                what: what.to_string(),
                last,
            });
        }
        tokio::time::sleep(POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

/// Checks `probe` again and again for `span` (the step's meaning is "for this long").
///
/// # Errors
/// [`StepError::NotThroughout`] at the first answer that is not `Ok`, with `what` was
/// expected and what was observed, or when a look gets no answer within the span (at least
/// 5 s).
pub async fn throughout<F, Fut>(span: Duration, what: &str, mut probe: F) -> Result<(), StepError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let begin = Instant::now();
    let patience = span.max(Duration::from_secs(5));
    loop {
        match tokio::time::timeout(patience, probe()).await {
            Ok(Ok(())) => {}
            Ok(Err(observed)) => {
                return Err(StepError::NotThroughout {
                    span,
                    what: what.to_string(),
                    after: begin.elapsed(),
                    observed,
                });
            }
            Err(_) => {
                return Err(StepError::NotThroughout {
                    span,
                    what: what.to_string(),
                    after: begin.elapsed(),
                    observed: format!("a look got no answer within {patience:?}"),
                });
            }
        }
        if begin.elapsed() >= span {
            return Ok(());
        }
        tokio::time::sleep(POLL.min(span.saturating_sub(begin.elapsed()))).await;
    }
}
