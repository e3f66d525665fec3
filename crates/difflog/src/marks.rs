//! A checkpoint's marks in each log stream. The begin mark lists the stream's active
//! transactions with the LSN of each one's last record before it, so restart can undo what a
//! loser wrote before the checkpoint (those changes are in the backup image) by following
//! each transaction's chain backwards. The end mark says every page is in the backup.
//!
//! ```text
//! begin    0  8 checkpoint number       end   0  8 checkpoint number
//!          8  4 active transactions
//!         12  4 zero
//!         16    per transaction: u64 id, u64 LSN of its last record
//! ```

use crate::kinds::{STREAM_CHECKPOINT_BEGIN, STREAM_CHECKPOINT_END};
use lodestore_core::{Lsn, TxnId};
use lodestore_wal::record::Body;

/// The begin mark of checkpoint `checkpoint` in one stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointBegin {
    pub checkpoint: u64,
    pub active: Vec<(TxnId, Lsn)>,
}

/// The end mark of checkpoint `checkpoint` in one stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointEnd {
    pub checkpoint: u64,
}

impl Body for CheckpointBegin {
    fn kind(&self) -> u8 {
        STREAM_CHECKPOINT_BEGIN
    }

    fn body_len(&self) -> usize {
        16 + 16 * self.active.len()
    }

    fn write_body(&self, out: &mut [u8]) -> u16 {
        out[0..8].copy_from_slice(&self.checkpoint.to_le_bytes());
        out[8..12].copy_from_slice(&(self.active.len() as u32).to_le_bytes());
        for (i, (txn, last)) in self.active.iter().enumerate() {
            let at = 16 + 16 * i;
            out[at..at + 8].copy_from_slice(&txn.0.to_le_bytes());
            out[at + 8..at + 16].copy_from_slice(&last.0.to_le_bytes());
        }
        0
    }
}

impl Body for CheckpointEnd {
    fn kind(&self) -> u8 {
        STREAM_CHECKPOINT_END
    }

    fn body_len(&self) -> usize {
        8
    }

    fn write_body(&self, out: &mut [u8]) -> u16 {
        out[0..8].copy_from_slice(&self.checkpoint.to_le_bytes());
        0
    }
}

fn u64_at(body: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(body[at..at + 8].try_into().unwrap())
}

impl CheckpointBegin {
    pub fn parse(body: &[u8]) -> Result<CheckpointBegin, String> {
        if body.len() < 16 {
            return Err("checkpoint begin mark shorter than its header".into());
        }
        let count = u32::from_le_bytes(body[8..12].try_into().unwrap()) as usize;
        if body.len() != 16 + 16 * count {
            return Err(format!(
                "checkpoint begin mark of {} bytes cannot list {count} transactions",
                body.len()
            ));
        }
        let active = (0..count)
            .map(|i| {
                let at = 16 + 16 * i;
                (TxnId(u64_at(body, at)), Lsn(u64_at(body, at + 8)))
            })
            .collect();
        Ok(CheckpointBegin {
            checkpoint: u64_at(body, 0),
            active,
        })
    }
}

impl CheckpointEnd {
    pub fn parse(body: &[u8]) -> Result<CheckpointEnd, String> {
        if body.len() != 8 {
            return Err(format!("checkpoint end mark of {} bytes", body.len()));
        }
        Ok(CheckpointEnd {
            checkpoint: u64_at(body, 0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_read_back_and_bad_lengths_are_named() {
        let begin = CheckpointBegin {
            checkpoint: 5,
            active: vec![(TxnId(9), Lsn(4096)), (TxnId(12), Lsn(8192))],
        };
        let mut body = vec![0u8; begin.body_len()];
        begin.write_body(&mut body);
        assert_eq!(CheckpointBegin::parse(&body).unwrap(), begin);
        assert!(CheckpointBegin::parse(&body[..body.len() - 16])
            .unwrap_err()
            .contains("cannot list 2"));
        let end = CheckpointEnd { checkpoint: 5 };
        let mut body = vec![0u8; 8];
        end.write_body(&mut body);
        assert_eq!(CheckpointEnd::parse(&body).unwrap(), end);
        assert!(CheckpointEnd::parse(&body[..4]).is_err());
    }
}
