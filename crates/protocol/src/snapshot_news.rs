//! Snapshot history at clients, Thor's way (Moh section 2.3). The server, which coordinates
//! snapshots, tells clients about them in messages of the form (previous time, snapshots
//! taken after it, current time), piggybacked on its replies: a message says "these are all
//! the snapshots in (previous, current]". A client keeps what it learnt and the time up to
//! which its knowledge is complete (T_gmax), and for each message:
//!
//! - drops it when its current time is not past T_gmax (it says nothing new);
//! - reports a gap when its previous time is past T_gmax (something between is missing: ask
//!   the server for the news of (T_gmax, previous], apply that, then this message);
//! - otherwise adds the snapshots after T_gmax and moves T_gmax to the current time.
//!
//! A read "as of t" is then answered locally when t is at or before T_gmax, and needs fresh
//! news otherwise. Pure data and rules, no I/O.

use std::collections::BTreeMap;

/// News of snapshots: every snapshot taken in `(prev_us, curr_us]`, as (id, time) pairs in
/// time order. Times are microseconds since the Unix epoch, by the server's clock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotNews {
    pub prev_us: u64,
    pub taken: Vec<(u64, u64)>,
    pub curr_us: u64,
}

impl SnapshotNews {
    /// Why the news cannot be true, if it cannot: the current time before the previous one,
    /// snapshots outside the interval or out of order.
    pub fn malformed(&self) -> Option<String> {
        if self.curr_us < self.prev_us {
            return Some(format!(
                "current time {} is before previous time {}",
                self.curr_us, self.prev_us
            ));
        }
        let mut last = self.prev_us;
        for &(id, time) in &self.taken {
            if time <= last || time > self.curr_us {
                return Some(format!(
                    "snapshot {id} at {time} µs is out of order or outside ({}, {}]",
                    self.prev_us, self.curr_us
                ));
            }
            last = time;
        }
        None
    }
}

/// What a client did with a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Accepted {
    /// Learnt; T_gmax moved to the message's current time.
    Applied,
    /// Nothing newer than what is known: dropped.
    Redundant,
    /// News of `(from_us, to_us]` is missing: fetch it, apply it, then this message again.
    Gap { from_us: u64, to_us: u64 },
    /// The message cannot be true: dropped.
    Malformed(String),
}

/// Where a time falls in what a client knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The newest known snapshot at or before the time: (id, time).
    Snapshot(u64, u64),
    /// No snapshot at or before the time (known complete up to T_gmax).
    BeforeFirst,
    /// The time is past T_gmax: fresh news is needed to answer.
    Unknown,
}

/// A client's knowledge of the snapshot history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotHistory {
    /// time -> id, complete up to `gmax_us`.
    known: BTreeMap<u64, u64>,
    gmax_us: u64,
}

impl SnapshotHistory {
    pub fn new() -> SnapshotHistory {
        SnapshotHistory::default()
    }

    /// T_gmax: knowledge is complete up to this time.
    pub fn gmax_us(&self) -> u64 {
        self.gmax_us
    }

    /// The known snapshots, (id, time), oldest first.
    pub fn known(&self) -> Vec<(u64, u64)> {
        self.known.iter().map(|(&time, &id)| (id, time)).collect()
    }

    /// Takes in a message by the rules above.
    pub fn accept(&mut self, news: &SnapshotNews) -> Accepted {
        if let Some(reason) = news.malformed() {
            return Accepted::Malformed(reason);
        }
        if news.curr_us <= self.gmax_us {
            return Accepted::Redundant;
        }
        if news.prev_us > self.gmax_us {
            return Accepted::Gap {
                from_us: self.gmax_us,
                to_us: news.prev_us,
            };
        }
        for &(id, time) in &news.taken {
            if time > self.gmax_us {
                self.known.insert(time, id);
            }
        }
        self.gmax_us = news.curr_us;
        Accepted::Applied
    }

    /// The snapshot a read as of `time_us` sees.
    pub fn at(&self, time_us: u64) -> Lookup {
        if time_us > self.gmax_us {
            return Lookup::Unknown;
        }
        match self.known.range(..=time_us).next_back() {
            Some((&time, &id)) => Lookup::Snapshot(id, time),
            None => Lookup::BeforeFirst,
        }
    }

    /// The snapshot `id` was deleted: it no longer answers reads.
    pub fn forget(&mut self, id: u64) {
        self.known.retain(|_, known| *known != id);
    }

    /// The oldest known snapshot, (id, time).
    pub fn first(&self) -> Option<(u64, u64)> {
        self.known.iter().next().map(|(&time, &id)| (id, time))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The news of `(prev, curr]` from the true history (time -> id).
    fn news_of(truth: &BTreeMap<u64, u64>, prev: u64, curr: u64) -> SnapshotNews {
        SnapshotNews {
            prev_us: prev,
            taken: truth
                .iter()
                .filter(|(&time, _)| prev < time && time <= curr)
                .map(|(&time, &id)| (id, time))
                .collect(),
            curr_us: curr,
        }
    }

    #[test]
    fn the_thesis_example_of_a_gap() {
        // Snapshots at 90 and 110; the client's last accepted message ended at 87.
        let truth: BTreeMap<u64, u64> = [(50, 1), (90, 2), (110, 3)].into();
        let mut client = SnapshotHistory::new();
        assert_eq!(client.accept(&news_of(&truth, 0, 87)), Accepted::Applied);
        // M1 covers (100, 120]: what happened in (87, 100] is missing.
        let m1 = news_of(&truth, 100, 120);
        assert_eq!(
            client.accept(&m1),
            Accepted::Gap {
                from_us: 87,
                to_us: 100
            }
        );
        assert_eq!(client.gmax_us(), 87, "a gap changes nothing");
        // The sender answers the update request with M2 for (87, 100]; then M1 applies.
        assert_eq!(client.accept(&news_of(&truth, 87, 100)), Accepted::Applied);
        assert_eq!(client.accept(&m1), Accepted::Applied);
        assert_eq!(client.known(), vec![(1, 50), (2, 90), (3, 110)]);
        assert_eq!(client.gmax_us(), 120);
        // A late copy of M2 is redundant.
        assert_eq!(
            client.accept(&news_of(&truth, 87, 100)),
            Accepted::Redundant
        );
        assert_eq!(client.at(95), Lookup::Snapshot(2, 90));
        assert_eq!(client.at(49), Lookup::BeforeFirst);
        assert_eq!(client.at(121), Lookup::Unknown);
    }

    #[test]
    fn impossible_news_is_refused() {
        let mut client = SnapshotHistory::new();
        for news in [
            SnapshotNews {
                prev_us: 10,
                taken: vec![],
                curr_us: 5,
            },
            SnapshotNews {
                prev_us: 10,
                taken: vec![(1, 10)],
                curr_us: 20,
            },
            SnapshotNews {
                prev_us: 0,
                taken: vec![(1, 15), (2, 12)],
                curr_us: 20,
            },
        ] {
            assert!(matches!(client.accept(&news), Accepted::Malformed(_)));
        }
        assert_eq!(client, SnapshotHistory::new());
    }

    proptest! {
        /// Whatever order and overlap messages arrive in, filling gaps from the sender keeps
        /// the client's knowledge exactly the true snapshots up to T_gmax, and T_gmax never
        /// moves back.
        #[test]
        fn knowledge_is_always_the_truth_up_to_t_gmax(
            times in proptest::collection::btree_set(1u64..1000, 0..30),
            messages in proptest::collection::vec((0u64..1000, 0u64..200), 1..40),
        ) {
            let truth: BTreeMap<u64, u64> =
                times.iter().enumerate().map(|(i, &t)| (t, i as u64 + 1)).collect();
            let mut client = SnapshotHistory::new();
            for (prev, span) in messages {
                let news = news_of(&truth, prev, prev + span);
                let before = client.gmax_us();
                match client.accept(&news) {
                    Accepted::Gap { from_us, to_us } => {
                        prop_assert_eq!(from_us, before);
                        prop_assert!(to_us > before);
                        prop_assert_eq!(
                            client.accept(&news_of(&truth, from_us, to_us)),
                            Accepted::Applied
                        );
                        // Applied, unless the message ends where the gap did.
                        let again = client.accept(&news);
                        prop_assert!(
                            again == Accepted::Applied
                                || (again == Accepted::Redundant && news.curr_us == to_us),
                            "{:?}", again
                        );
                    }
                    Accepted::Redundant => prop_assert!(news.curr_us <= before),
                    Accepted::Applied => prop_assert!(news.curr_us > before),
                    Accepted::Malformed(reason) => prop_assert!(false, "{}", reason),
                }
                prop_assert!(client.gmax_us() >= before);
                let expected: Vec<(u64, u64)> = truth
                    .range(..=client.gmax_us())
                    .map(|(&time, &id)| (id, time))
                    .collect();
                prop_assert_eq!(client.known(), expected);
                // Every time up to T_gmax is answered as the truth answers it.
                for probe in [0, client.gmax_us() / 2, client.gmax_us()] {
                    let want = match truth.range(..=probe).next_back() {
                        Some((&time, &id)) => Lookup::Snapshot(id, time),
                        None => Lookup::BeforeFirst,
                    };
                    prop_assert_eq!(client.at(probe), want);
                }
            }
        }
    }
}
