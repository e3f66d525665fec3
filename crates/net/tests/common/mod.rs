//! What the server tests share: a server on a free loopback port in a folder of its own, raw
//! connections, and checks that a connection was closed and that a real client is served.

#![allow(dead_code)] // each test binary uses its own part

use lodestore_net::frame::{read_frame, write_frame};
use lodestore_net::message::{decode, encode, Request, Response};
use lodestore_net::RemotePageServer;
use lodestore_server::{LockMode, PageServer, Server, ServerOptions};
use lodestore_storage::RealFileSystem;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub struct Running {
    pub address: String,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

pub fn start_server() -> Running {
    start_server_with(lodestore_net::ServeLimits::default())
}

pub fn start_server_with(limits: lodestore_net::ServeLimits) -> Running {
    start_server_auth(limits, lodestore_net::auth::ServerAuth::none())
}

pub fn start_server_auth(
    limits: lodestore_net::ServeLimits,
    auth: lodestore_net::auth::ServerAuth,
) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions {
        lock_wait_timeout: Duration::from_secs(2),
        ..ServerOptions::default()
    };
    let server = Arc::new(
        Server::create(
            Arc::new(RealFileSystem),
            &dir.path().join("s"),
            8192,
            options,
        )
        .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            lodestore_net::serve_with(server, listener, stop, limits, auth).unwrap();
        })
    };
    Running {
        address,
        stop,
        thread: Some(thread),
        _dir: dir,
    }
}

/// A raw connection; `hello` says hello first.
pub fn raw(address: &str, hello: bool) -> TcpStream {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    if hello {
        let body = encode(&Request::Hello {
            client: "test".into(),
            nonce: vec![7u8; 32],
        });
        write_frame(&mut stream, 1, &body).unwrap();
        let frame = read_frame(&mut stream).unwrap();
        assert!(matches!(
            decode::<Response>(&frame.body).unwrap(),
            Response::Welcome { .. }
        ));
    }
    stream
}

/// The server closed the connection: reading yields end of stream (after any answer).
pub fn assert_closed(stream: &mut TcpStream) {
    let mut rest = Vec::new();
    let result = stream.read_to_end(&mut rest);
    assert!(
        result.is_ok()
            || matches!(result, Err(ref e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{result:?}"
    );
}

/// A well-behaved client still gets served.
pub fn assert_serving(address: &str) {
    let remote = RemotePageServer::connect(address, "check").unwrap();
    let txn = remote.begin().unwrap();
    let page = remote.root_directory().page();
    remote.lock_page(txn, page, LockMode::Shared).unwrap();
    remote.commit(txn).unwrap();
}
