//! The memory a server spends on request bodies, bounded in total across connections: each
//! connection may hold one frame of at most `MAX_FRAME_BODY` bytes, and all of them together at
//! most `BUFFERED_BYTES_MAX`. A connection whose frame does not fit waits for room, at most
//! `ADMIT_WAIT_MAX`, then is closed with the reason.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Request bytes all connections of one server may hold at once.
pub const BUFFERED_BYTES_MAX: usize = 256 << 20;
/// How long a connection waits for room before it is refused.
pub const ADMIT_WAIT_MAX: Duration = Duration::from_secs(5);

/// Bytes held, shared by a server's connections.
#[derive(Clone, Debug)]
pub struct Budget {
    held: Arc<AtomicUsize>,
    limit: usize,
}

/// Bytes one connection holds until it is dropped.
#[derive(Debug)]
pub struct Held {
    budget: Budget,
    bytes: usize,
}

impl Budget {
    pub fn new(limit: usize) -> Budget {
        Budget {
            held: Arc::default(),
            limit,
        }
    }

    /// Bytes held by all connections now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Takes `bytes` at once if they fit.
    pub fn try_take(&self, bytes: usize) -> Option<Held> {
        let mut current = self.held.load(Ordering::Acquire);
        loop {
            let wanted = current.checked_add(bytes).filter(|&w| w <= self.limit)?;
            match self.held.compare_exchange_weak(
                current,
                wanted,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Some(Held {
                        budget: self.clone(),
                        bytes,
                    })
                }
                Err(seen) => current = seen,
            }
        }
    }

    /// Takes `bytes`, waiting up to `wait` for others to give room back.
    pub fn take(&self, bytes: usize, wait: Duration) -> Option<Held> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(held) = self.try_take(bytes) {
                return Some(held);
            }
            if bytes > self.limit || Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{read_frame_admitted, write_frame, FrameError};

    #[test]
    fn bytes_are_held_until_dropped_and_never_past_the_limit() {
        let budget = Budget::new(100);
        let a = budget.try_take(60).unwrap();
        assert!(budget.try_take(41).is_none());
        let b = budget.try_take(40).unwrap();
        assert_eq!(budget.held(), 100);
        assert!(budget.take(1, Duration::from_millis(20)).is_none());
        drop(a);
        assert_eq!(budget.held(), 40);
        assert!(budget.take(60, Duration::ZERO).is_some());
        drop(b);
        assert_eq!(budget.held(), 0);
        assert!(
            budget.take(101, Duration::from_secs(60)).is_none(),
            "waited for the impossible"
        );
    }

    #[test]
    fn a_frame_over_the_budget_is_refused_before_its_body_is_read() {
        let mut bytes = Vec::new();
        write_frame(&mut bytes, 7, &[5u8; 1000]).unwrap();
        let budget = Budget::new(999);
        let mut held = None;
        let result = read_frame_admitted(&mut bytes.as_slice(), |len| {
            held = Some(budget.try_take(len).ok_or(FrameError::OverBudget(len))?);
            Ok(())
        });
        assert!(matches!(result, Err(FrameError::OverBudget(1000))));
        assert_eq!(budget.held(), 0);
    }
}
