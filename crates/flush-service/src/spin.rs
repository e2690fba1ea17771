//! Whether lone waiters' spins are winning ([`SpinGate`]): a spin that runs out
//! before its answer, or loses its CPU while it spins, burned a CPU the flush
//! thread may have needed (on a machine whose CPUs are busy, it is the flush
//! thread's CPU), so the next waits sleep at once, longer after each miss in a
//! row.

use std::time::{Duration, Instant};

use crate::sync::{AtomicU64, Ordering};

/// A gap between two turns of a spin loop this long means the spinning
/// thread was descheduled (a turn takes tens of nanoseconds; an interrupt a
/// few microseconds).
const DESCHEDULED: Duration = Duration::from_micros(20);

/// Spins until `done` says so or `within` has passed; true if it won: `done`
/// came true without the thread losing its CPU on the way (a spin that lost
/// it competed for a CPU with the thread it waits for).
pub(crate) fn spin_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    let mut last = start;
    let mut descheduled = false;
    loop {
        if done() {
            return !descheduled;
        }
        let now = Instant::now();
        descheduled |= now.duration_since(last) > DESCHEDULED;
        last = now;
        if now.duration_since(start) >= within {
            return false;
        }
        std::hint::spin_loop();
    }
}

/// Waits that sleep at once after a first miss.
pub(crate) const FIRST_PENALTY: u64 = 8;
/// The most waits that sleep at once after misses in a row, before a spin is
/// tried again.
pub(crate) const MOST_PENALTY: u64 = 1024;

/// Shared by the service (which asks it whether a new request's wait may spin)
/// and the requests' completions (which tell it how each spin ended).
#[derive(Debug)]
pub(crate) struct SpinGate {
    /// Waits left that do not spin.
    skip: AtomicU64,
    /// Waits that do not spin after the next miss: doubled by each miss in a
    /// row, back to [`FIRST_PENALTY`] after a spin that caught its answer.
    penalty: AtomicU64,
    /// Spins that did not win, since the service started.
    misses: AtomicU64,
}

impl Default for SpinGate {
    fn default() -> Self {
        SpinGate { skip: AtomicU64::new(0), penalty: AtomicU64::new(FIRST_PENALTY), misses: AtomicU64::new(0) }
    }
}

impl SpinGate {
    /// True if a wait that wants to spin may: none since a recent miss.
    /// Counts the waits that may not.
    pub(crate) fn admits(&self) -> bool {
        let mut skip = self.skip.load(Ordering::Relaxed);
        loop {
            if skip == 0 {
                return true;
            }
            match self.skip.compare_exchange_weak(skip, skip - 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return false,
                Err(now) => skip = now,
            }
        }
    }

    /// True while no recent miss keeps spins off (without counting a wait):
    /// what the service asks before it spins for the next request.
    pub(crate) fn is_open(&self) -> bool {
        self.skip.load(Ordering::Relaxed) == 0
    }

    /// How a spin ended: `caught` its answer (without losing its CPU), or not.
    pub(crate) fn record(&self, caught: bool) {
        if caught {
            self.penalty.store(FIRST_PENALTY, Ordering::Relaxed);
            return;
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let penalty = self.penalty.load(Ordering::Relaxed);
        self.skip.store(penalty, Ordering::Relaxed);
        self.penalty.store(penalty.saturating_mul(2).min(MOST_PENALTY), Ordering::Relaxed);
    }

    /// Spins that did not win.
    pub(crate) fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn admitted(gate: &SpinGate, waits: u64) -> u64 {
        (0..waits).filter(|_| gate.admits()).count() as u64
    }

    #[test]
    fn misses_in_a_row_keep_waits_from_spinning_longer_each_time() {
        let gate = SpinGate::default();
        assert_eq!(admitted(&gate, 100), 100, "spins until one misses");
        gate.record(false);
        assert_eq!(admitted(&gate, FIRST_PENALTY), 0);
        assert!(gate.admits(), "then one is tried");
        gate.record(false);
        assert_eq!(admitted(&gate, 2 * FIRST_PENALTY), 0, "twice as long after a second miss in a row");
        assert!(gate.admits());
        for _ in 0..20 {
            gate.record(false);
        }
        assert_eq!(admitted(&gate, MOST_PENALTY), 0);
        assert!(gate.admits(), "never more than the bound");
        assert_eq!(gate.misses(), 22);
    }

    #[test]
    fn a_caught_answer_brings_the_penalty_back_to_its_start() {
        let gate = SpinGate::default();
        for _ in 0..5 {
            gate.record(false);
        }
        // 8, 16, 32, 64 and then 128 waits: the last miss's penalty is what is left.
        assert_eq!(admitted(&gate, MOST_PENALTY), MOST_PENALTY - 16 * FIRST_PENALTY);
        gate.record(true);
        gate.record(false);
        assert_eq!(admitted(&gate, FIRST_PENALTY + 1), 1, "a miss after a hit costs the first penalty");
    }
}
