//! Shared helpers of the integration tests: those of the simulator's tests too (a running
//! simulated API server, raw requests, waits) come from `sim-test-support`; stopping a
//! child process is the harness's own.

#![allow(dead_code, unused_imports)]

use std::time::Duration;

pub use sim_test_support::{WAIT, eventually, json, raw, server};

/// Stops a child process the way a user would, with SIGTERM, so that it can clean up
/// (an `opconform sim` shuts its cluster down and removes its work directory); SIGKILL only
/// when it is still running after 10 s.
pub fn stop_child(child: &mut std::process::Child) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}
