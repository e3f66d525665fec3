//! Transactions that run again when they lose a lock conflict: `Session::transact` runs a
//! closure in a transaction and commits it, and when the transaction is chosen as a deadlock
//! victim or times out waiting for a lock, aborts it and runs the closure again, a bounded
//! number of times, with a growing randomised pause between attempts (so two sessions that
//! deadlocked do not meet again at once). What ZODB's `transaction.manager.attempts()` and
//! FoundationDB's `db.run` give their users.

use std::time::Duration;

/// Attempts a retrying transaction makes at most, unless told otherwise.
pub const ATTEMPTS_DEFAULT: u32 = 10;
/// Most attempts a retry policy may ask for.
pub const ATTEMPTS_MAX: u32 = 1000;

/// How a retrying transaction retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    pub(crate) attempts: u32,
    pub(crate) first_pause: Duration,
    pub(crate) longest_pause: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: ATTEMPTS_DEFAULT,
            first_pause: Duration::from_micros(500),
            longest_pause: Duration::from_millis(100),
        }
    }
}

impl RetryPolicy {
    pub fn new() -> RetryPolicy {
        RetryPolicy::default()
    }

    /// Runs in all, the first included (1 to 1000; default 10).
    pub fn attempts(mut self, attempts: u32) -> RetryPolicy {
        self.attempts = attempts.clamp(1, ATTEMPTS_MAX);
        self
    }

    /// The pause after the first failed attempt (default 0.5 ms); each later one doubles, up
    /// to `longest_pause` (default 100 ms), and is drawn between half and all of that.
    pub fn pauses(mut self, first_pause: Duration, longest_pause: Duration) -> RetryPolicy {
        self.first_pause = first_pause;
        self.longest_pause = longest_pause.max(first_pause);
        self
    }

    pub fn attempts_max(&self) -> u32 {
        self.attempts
    }

    /// The pause after failed attempt `attempt` (1-based), given a random number.
    pub(crate) fn pause(&self, attempt: u32, random: u64) -> Duration {
        let doubled = self
            .first_pause
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        let ceiling = doubled.min(self.longest_pause);
        // Between half and all of the ceiling.
        let nanos = ceiling.as_nanos() as u64;
        Duration::from_nanos(nanos / 2 + random % (nanos / 2 + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_to_the_longest_and_stay_in_their_band() {
        let policy = RetryPolicy::new().pauses(Duration::from_millis(1), Duration::from_millis(8));
        for (attempt, ceiling_ms) in [(1, 1), (2, 2), (3, 4), (4, 8), (5, 8), (40, 8)] {
            let ceiling = Duration::from_millis(ceiling_ms);
            for random in [0, 1, 12345, u64::MAX] {
                let pause = policy.pause(attempt, random);
                assert!(
                    pause >= ceiling / 2 && pause <= ceiling,
                    "{attempt}: {pause:?}"
                );
            }
        }
        assert_eq!(RetryPolicy::new().attempts(0).attempts_max(), 1);
        assert_eq!(
            RetryPolicy::new().attempts(1 << 30).attempts_max(),
            ATTEMPTS_MAX
        );
    }
}
