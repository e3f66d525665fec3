//! Differential logging (Lee, Kim & Cha, "A Commutative and Associative Logging Scheme for
//! Highly Parallel Main Memory Database", ICDE 2001): the family's log records and restarts.
//!
//! - [`xor`]: the XOR record (one delta serves redo and undo; changes commute), section 3.1-3.2.
//! - [`physical`]: the physical-logging baseline's records (before and after images, serial
//!   numbers, compensation records), the paper's PL2P.
//! - [`range_header`]: the header of a changed range, shared by both kinds of change record.
//! - [`marks`]: a checkpoint's begin and end marks in each log stream, section 3.3.
//! - [`restart`]: the one-pass (DL1P, Algorithm 3) and two-pass (DL2P) restarts of one stream,
//!   the physical two-pass restart across streams (PL2P), and parallel restart (section 4.2).
//!
//! - [`anchor`], [`backup`]: the last complete checkpoint, and the two backup images
//!   checkpoints write in turn (ping-pong), section 3.3.
//!
//! Record kinds are in `lodestore_wal::kinds::DIFFERENTIAL` ([`kinds`]).

pub mod anchor;
pub mod backup;
pub mod kinds;
pub mod marks;
pub mod physical;
pub mod range_header;
pub mod restart;
pub mod xor;
