//! The background installer of whole-page logging (QuickStore section 3.4.2): a thread that
//! writes committed page images from the log to their home locations, so checkpoints find
//! little left to do and the log's space is reused sooner.

use crate::server::Server;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// Pages installed per turn: a turn holds the server's state, so it stays short.
const INSTALL_BATCH_PAGES: usize = 32;
/// Pause between turns when nothing is waiting.
const IDLE_PAUSE: Duration = Duration::from_millis(20);
/// Pause after a failed turn (the server refuses work until reopened; no point hurrying).
const FAILED_PAUSE: Duration = Duration::from_secs(1);

/// Runs until dropped. Holds the server weakly: it never keeps a closed store alive.
pub struct BackgroundInstaller {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl BackgroundInstaller {
    pub fn start(server: &Arc<Server>) -> std::io::Result<BackgroundInstaller> {
        let stop = Arc::new(AtomicBool::new(false));
        let weak: Weak<Server> = Arc::downgrade(server);
        let thread = std::thread::Builder::new()
            .name("lodestore-installer".into())
            .spawn({
                let stop = stop.clone();
                move || run(weak, stop)
            })?;
        Ok(BackgroundInstaller {
            stop,
            thread: Some(thread),
        })
    }
}

fn run(server: Weak<Server>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        let Some(server) = server.upgrade() else {
            return;
        };
        let pause = match server.install_committed(INSTALL_BATCH_PAGES) {
            Ok(INSTALL_BATCH_PAGES) => Duration::ZERO,
            Ok(_) => IDLE_PAUSE,
            Err(e) => {
                tracing::warn!(error = %e, "background install failed");
                FAILED_PAUSE
            }
        };
        drop(server);
        if !pause.is_zero() {
            std::thread::park_timeout(pause);
        }
    }
}

impl Drop for BackgroundInstaller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            if thread.join().is_err() {
                tracing::warn!("background installer panicked");
            }
        }
    }
}
