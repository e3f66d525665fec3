//! The open connections of a server: where each comes from, whether it holds a transaction and
//! when it last spoke, and which one to close when a new connection would pass a limit.
//! Closing the connection idle longest without a transaction (one still in its handshake
//! first), rather than refusing the new one, keeps a flood of idle connections from locking
//! real clients out.

use crate::limits::ServeLimits;
use std::collections::BTreeMap;
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// What a connection's thread tells the registry about itself.
#[derive(Debug)]
pub struct Activity {
    started: Instant,
    /// The handshake is done (the client proved who it is, where the server asks).
    greeted: AtomicBool,
    in_transaction: AtomicBool,
    last_heard_ms: AtomicU64,
}

impl Activity {
    /// The connection just received a request.
    pub fn heard(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_heard_ms.store(ms, Ordering::Relaxed);
    }

    /// The connection's handshake is done.
    pub fn set_greeted(&self) {
        self.greeted.store(true, Ordering::Relaxed);
    }

    /// Whether the connection holds a transaction now.
    pub fn set_in_transaction(&self, holding: bool) {
        self.in_transaction.store(holding, Ordering::Relaxed);
    }
}

struct Entry {
    /// A second handle on the socket, to shut it down.
    stream: TcpStream,
    peer: IpAddr,
    activity: Arc<Activity>,
}

/// The registry of one server.
pub struct Registry {
    started: Instant,
    entries: Mutex<BTreeMap<u64, Entry>>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            started: Instant::now(),
            entries: Mutex::default(),
        }
    }
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes in connection `id` from `peer`, closing the longest-idle connection without a
    /// transaction where a limit would be passed; `Err` (with the reason) when none can go.
    pub fn admit(
        &self,
        id: u64,
        stream: TcpStream,
        peer: IpAddr,
        limits: &ServeLimits,
    ) -> Result<Arc<Activity>, String> {
        let mut entries = self.lock();
        let from_peer = entries.values().filter(|e| e.peer == peer).count();
        if from_peer >= limits.max_connections_per_peer
            && !evict_idlest(&mut entries, |e| e.peer == peer)
        {
            return Err(format!(
                "{} connections from {peer}, each with a transaction open",
                limits.max_connections_per_peer
            ));
        }
        if entries.len() >= limits.max_connections && !evict_idlest(&mut entries, |_| true) {
            return Err(format!(
                "{} connections, each with a transaction open",
                limits.max_connections
            ));
        }
        let activity = Arc::new(Activity {
            started: self.started,
            greeted: AtomicBool::new(false),
            in_transaction: AtomicBool::new(false),
            last_heard_ms: AtomicU64::new(self.started.elapsed().as_millis() as u64),
        });
        entries.insert(
            id,
            Entry {
                stream,
                peer,
                activity: activity.clone(),
            },
        );
        Ok(activity)
    }

    /// Connection `id` ended (or was closed by eviction).
    pub fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Shuts every connection down (the server is stopping).
    pub fn shut_down_all(&self) {
        for entry in self.lock().values() {
            let _ = entry.stream.shutdown(Shutdown::Both);
        }
    }
}

/// Shuts down and forgets the connection, among those `eligible`, that holds no transaction
/// and has been silent longest, taking one still in its handshake first: a flood of
/// connections that never prove who they are then pushes out only its own kind, never a
/// client that did. Returns whether there was one.
fn evict_idlest(entries: &mut BTreeMap<u64, Entry>, eligible: impl Fn(&Entry) -> bool) -> bool {
    let idlest = entries
        .iter()
        .filter(|(_, e)| eligible(e) && !e.activity.in_transaction.load(Ordering::Relaxed))
        .min_by_key(|(_, e)| {
            (
                e.activity.greeted.load(Ordering::Relaxed),
                e.activity.last_heard_ms.load(Ordering::Relaxed),
            )
        })
        .map(|(&id, _)| id);
    let Some(id) = idlest else {
        return false;
    };
    let entry = entries.remove(&id).expect("found above");
    tracing::info!(peer = %entry.peer, "closed the connection idle longest to make room");
    let _ = entry.stream.shutdown(Shutdown::Both);
    true
}
