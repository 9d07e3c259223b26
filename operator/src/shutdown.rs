//! A shutdown signal that many tasks can wait on and one place triggers (SIGTERM, tests).

use tokio::sync::watch;

/// Triggers shutdown for every [`Shutdown`] cloned from the same pair.
#[derive(Debug, Clone)]
pub struct ShutdownTrigger(watch::Sender<bool>);

/// Waits for shutdown; cheap to clone.
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

/// A connected trigger and signal.
#[must_use]
pub fn channel() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger(tx), Shutdown(rx))
}

impl ShutdownTrigger {
    /// Signals shutdown; idempotent.
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// Whether shutdown was signalled.
    #[must_use]
    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once shutdown is signalled (at once if it already was).
    ///
    /// # Caveats
    /// If every trigger is dropped without firing, this never resolves.
    pub async fn wait(&mut self) {
        if self.0.wait_for(|v| *v).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_sees_the_trigger() {
        let (tx, rx) = channel();
        let mut a = rx.clone();
        let b = rx;
        assert!(!b.is_triggered());
        tx.trigger();
        a.wait().await;
        assert!(b.is_triggered());
    }
}
