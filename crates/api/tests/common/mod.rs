//! What several test files share: a store served over TCP on loopback.
//! Each test file compiles its own copy and uses part of it.
#![allow(dead_code)]

use lodestore::{Options, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A store created in a folder of its own and served on a loopback port until `stop`.
pub struct Served {
    pub store: Arc<Store>,
    pub address: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<usize>>,
    _dir: tempfile::TempDir,
}

impl Served {
    /// Creates a store with `options` and serves it.
    pub fn new(options: Options) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::create(dir.path().join("s"), options).unwrap());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || store.serve(listener, stop).unwrap())
        };
        Served {
            store,
            address,
            stop,
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// Stops serving and waits for the server to finish (its errors fail the test).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}
