//! Background workers: threads a recovery method asks the engine to run beside it (whole-page
//! logging's installer, which writes committed page images from the log to their home
//! locations). The method names its workers and what one turn of each does; the engine runs
//! the turns, pauses when a turn finds nothing to do, and stops the threads when dropped.

use crate::server::Server;
use lodestore_core::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// A worker a recovery method runs in the background.
#[derive(Clone, Copy, Debug)]
pub struct BackgroundWorker {
    /// Its name; the thread is called `lodestore-NAME`.
    pub name: &'static str,
    /// One turn of its work. Returns whether more work is waiting (the next turn follows at
    /// once). A turn holds the server's state, so it stays short.
    pub turn: fn(&Server) -> Result<bool>,
}

/// Pause between turns when nothing is waiting.
const IDLE_PAUSE: Duration = Duration::from_millis(20);
/// Pause after a failed turn (the server refuses work until reopened; no point hurrying),
/// doubled after each further failure in a row up to [`FAILED_PAUSE_MAX`].
const FAILED_PAUSE: Duration = Duration::from_secs(1);
const FAILED_PAUSE_MAX: Duration = Duration::from_secs(64);

/// The pause after `failures` failed turns in a row (at least one).
fn failed_pause(failures: u32) -> Duration {
    debug_assert!(failures >= 1);
    FAILED_PAUSE
        .saturating_mul(1 << (failures - 1).min(16))
        .min(FAILED_PAUSE_MAX)
}

/// The running workers of a server's recovery method, until dropped. They hold the server
/// weakly: they never keep a closed store alive.
pub struct BackgroundWorkers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl BackgroundWorkers {
    /// Starts every worker the server's recovery method names (none for most methods).
    pub fn start(server: &Arc<Server>) -> std::io::Result<BackgroundWorkers> {
        let mut workers = BackgroundWorkers {
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
        };
        for worker in server.background_workers() {
            let weak: Weak<Server> = Arc::downgrade(server);
            let stop = workers.stop.clone();
            let thread = std::thread::Builder::new()
                .name(format!("lodestore-{}", worker.name))
                .spawn(move || run(worker, weak, stop))?;
            workers.threads.push(thread);
        }
        Ok(workers)
    }

    /// Names of the running workers.
    pub fn names(&self) -> Vec<String> {
        self.threads
            .iter()
            .filter_map(|t| t.thread().name().map(str::to_string))
            .collect()
    }
}

fn run(worker: BackgroundWorker, server: Weak<Server>, stop: Arc<AtomicBool>) {
    // Failures in a row, and the last one's message: a failure that repeats itself is logged
    // once, not at every retry.
    let mut failures = 0u32;
    let mut last_failure = String::new();
    while !stop.load(Ordering::Acquire) {
        let Some(server) = server.upgrade() else {
            return;
        };
        let pause = match (worker.turn)(&server) {
            Ok(more) => {
                if failures > 0 {
                    tracing::info!(worker = worker.name, failures, "background work goes on");
                }
                failures = 0;
                last_failure.clear();
                if more {
                    Duration::ZERO
                } else {
                    IDLE_PAUSE
                }
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let message = e.to_string();
                if message != last_failure {
                    tracing::warn!(worker = worker.name, error = %message, "background work failed; retrying with backoff");
                    last_failure = message;
                } else {
                    tracing::debug!(
                        worker = worker.name,
                        failures,
                        "background work failed again"
                    );
                }
                failed_pause(failures)
            }
        };
        drop(server);
        if !pause.is_zero() {
            std::thread::park_timeout(pause);
        }
    }
}

impl Drop for BackgroundWorkers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for thread in &self.threads {
            thread.thread().unpark();
        }
        for thread in self.threads.drain(..) {
            let name = thread.thread().name().unwrap_or("worker").to_string();
            if thread.join().is_err() {
                tracing::warn!(worker = name, "background worker panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_turns_back_off_to_a_bound() {
        assert_eq!(failed_pause(1), FAILED_PAUSE);
        assert_eq!(failed_pause(2), FAILED_PAUSE * 2);
        assert_eq!(failed_pause(7), FAILED_PAUSE_MAX);
        assert_eq!(failed_pause(u32::MAX), FAILED_PAUSE_MAX);
    }
}
