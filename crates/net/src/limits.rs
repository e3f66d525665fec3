//! Every bound a server puts on its clients, each a named constant with its unit, gathered in
//! [`ServeLimits`] so that an operator (`lodestore serve --...`) or a test can change it.

use crate::budget::{ADMIT_WAIT_MAX, BUFFERED_BYTES_MAX};
use std::time::Duration;

/// Snapshot ids one request may name for deletion (the frame limit bounds it too).
pub const SNAPSHOT_IDS_MAX: usize = 4096;
/// Snapshots one piece of news may carry: a client that has heard nothing for long gets the
/// rest by asking again from where it stopped.
pub const NEWS_SNAPSHOTS_MAX: usize = 4096;

/// Connections served at once. At the limit, a new connection closes the one that has been
/// idle longest without a transaction; if every one holds a transaction, it is refused.
pub const MAX_CONNECTIONS: usize = 256;
/// Connections from one peer address at once, with the same rule at the limit.
pub const MAX_CONNECTIONS_PER_PEER: usize = 128;
/// Time from accepting a connection to the end of its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Silence after which a connection that holds no transaction is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Silence after which a connection that holds a transaction is closed and the transaction
/// rolled back (its locks would otherwise hold other clients up).
pub const SILENT_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);
/// Time one reply may take to be written: a client that stops reading is closed after it.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Time the goodbye of a closing connection (a TLS close_notify) may take to be written: a peer
/// that stopped reading does not hold the connection's thread for another `WRITE_TIMEOUT`.
pub const GOODBYE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long `serve`, once told to stop, waits for its connections to end after it shut them
/// down (each rolls back its open transactions and lets go of the server).
pub const CLOSE_WAIT_MAX: Duration = Duration::from_secs(10);

/// Bounds on what clients can make a server hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeLimits {
    /// `MAX_CONNECTIONS`.
    pub max_connections: usize,
    /// `MAX_CONNECTIONS_PER_PEER`.
    pub max_connections_per_peer: usize,
    /// `HANDSHAKE_TIMEOUT`.
    pub handshake_timeout: Duration,
    /// `IDLE_TIMEOUT`.
    pub idle_timeout: Duration,
    /// `SILENT_TRANSACTION_TIMEOUT`.
    pub silent_transaction_timeout: Duration,
    /// `WRITE_TIMEOUT`.
    pub write_timeout: Duration,
    /// Request bytes all connections together may hold (`BUFFERED_BYTES_MAX`).
    pub buffered_bytes_max: usize,
    /// How long a request waits for room in that budget before its connection is closed
    /// (`ADMIT_WAIT_MAX`).
    pub admit_wait: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            max_connections: MAX_CONNECTIONS,
            max_connections_per_peer: MAX_CONNECTIONS_PER_PEER,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            silent_transaction_timeout: SILENT_TRANSACTION_TIMEOUT,
            write_timeout: WRITE_TIMEOUT,
            buffered_bytes_max: BUFFERED_BYTES_MAX,
            admit_wait: ADMIT_WAIT_MAX,
        }
    }
}

impl ServeLimits {
    /// Checks that every limit lets a client do something: counts at least one, durations
    /// more than zero (a zero socket timeout would mean none at all).
    pub fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0 || self.max_connections_per_peer == 0 {
            return Err("connection limits must be at least 1".into());
        }
        for (name, value) in [
            ("handshake timeout", self.handshake_timeout),
            ("idle timeout", self.idle_timeout),
            (
                "silent transaction timeout",
                self.silent_transaction_timeout,
            ),
            ("write timeout", self.write_timeout),
        ] {
            if value.is_zero() {
                return Err(format!("the {name} must be more than zero"));
            }
        }
        if self.buffered_bytes_max == 0 {
            return Err("the request buffer budget must be more than zero".into());
        }
        Ok(())
    }
}
