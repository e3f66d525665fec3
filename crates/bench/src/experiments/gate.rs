//! A barrier for the client threads of one configuration that a failing client can break, so
//! the others return instead of waiting for it forever.

use std::sync::{Condvar, Mutex};

pub struct Gate {
    parties: usize,
    state: Mutex<GateState>,
    turned: Condvar,
}

struct GateState {
    arrived: usize,
    generation: u64,
    broken: bool,
}

/// A client failed; the gate no longer holds.
#[derive(Debug)]
pub struct Broken;

impl Gate {
    pub fn new(parties: usize) -> Gate {
        assert!(parties > 0);
        Gate {
            parties,
            state: Mutex::new(GateState {
                arrived: 0,
                generation: 0,
                broken: false,
            }),
            turned: Condvar::new(),
        }
    }

    /// Waits until every party arrived; exactly one of them gets `true` (the leader).
    pub fn wait(&self) -> Result<bool, Broken> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.broken {
            return Err(Broken);
        }
        state.arrived += 1;
        if state.arrived == self.parties {
            state.arrived = 0;
            state.generation += 1;
            self.turned.notify_all();
            return Ok(true);
        }
        let generation = state.generation;
        while state.generation == generation && !state.broken {
            state = self.turned.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        if state.generation == generation {
            return Err(Broken);
        }
        Ok(false)
    }

    /// Releases everyone waiting now or later with `Broken`.
    pub fn break_it(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.broken = true;
        self.turned.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_leader_per_turn_and_a_break_frees_the_waiters() {
        let gate = Gate::new(3);
        let leaders = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|_| s.spawn(|| (0..4).filter(|_| gate.wait().unwrap()).count()))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .sum::<usize>()
        });
        assert_eq!(leaders, 4);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| gate.wait());
            std::thread::sleep(std::time::Duration::from_millis(20));
            gate.break_it();
            assert!(waiter.join().unwrap().is_err());
        });
        assert!(gate.wait().is_err());
    }
}
