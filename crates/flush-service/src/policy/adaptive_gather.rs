//! A gather policy that measures the machine: its sync time and the producers'
//! return time.

use std::time::Duration;

use crate::policy::producers_back::{average, lone_spin, nanos, producers_back, LONE_ROUNDS};
use crate::{GatherDecision, GatherInput, GatherOutcome, GatherPolicy, RoundReport};

/// Waits for the producers the last round served, as [`ProducersBackPolicy`](crate::ProducersBackPolicy)
/// does, but only as long as it pays: it keeps moving averages of the sync time
/// and of the producers' return time (from a round's answers to the queue being
/// full again), and
///
/// - does not wait when producers come back slower than a sync takes (a second
///   sync costs less than the wait);
/// - otherwise waits at most twice their usual return time, within `max_gather`;
/// - spins a lone producer's wait about as long as a sync usually takes, within
///   `max_spin` (a slow disk's waiter sleeps at once instead of burning a CPU):
///   [`lone_spin`](crate::lone_spin).
///
/// Until it has measured, it behaves as the default policy.
#[derive(Debug, Clone)]
pub struct AdaptiveGatherPolicy {
    max_gather: Duration,
    max_spin: Duration,
    last_producers: usize,
    lone_rounds: u64,
    /// Moving average of a round's sync, in nanoseconds (0: not measured yet).
    sync_ns: u64,
    /// Moving average of the producers' return time, in nanoseconds (0: not yet).
    back_ns: u64,
}

impl AdaptiveGatherPolicy {
    /// Waits at most `max_gather`; spins at most `max_spin`.
    pub fn new(max_gather: Duration, max_spin: Duration) -> Self {
        AdaptiveGatherPolicy { max_gather, max_spin, last_producers: 0, lone_rounds: 0, sync_ns: 0, back_ns: 0 }
    }

    /// The measured moving averages: (sync time, producers' return time), if measured.
    pub fn measured(&self) -> (Option<Duration>, Option<Duration>) {
        let some = |ns: u64| (ns > 0).then(|| Duration::from_nanos(ns));
        (some(self.sync_ns), some(self.back_ns))
    }
}

impl GatherPolicy for AdaptiveGatherPolicy {
    fn before_sync(&mut self, input: &GatherInput) -> GatherDecision {
        let Some(queued) = producers_back(self.last_producers, input) else { return GatherDecision::Go };
        let within = match (self.sync_ns, self.back_ns) {
            (sync, back) if sync > 0 && back > 0 && back >= sync => return GatherDecision::Go,
            (_, back) if back > 0 => self.max_gather.min(Duration::from_nanos(back.saturating_mul(2))),
            _ => self.max_gather,
        };
        if within.is_zero() {
            return GatherDecision::Go;
        }
        GatherDecision::WaitFor { queued, within }
    }

    fn gathered(&mut self, outcome: &GatherOutcome) {
        if outcome.reached {
            self.back_ns = average(self.back_ns, nanos(outcome.since_answers));
        }
    }

    fn after_round(&mut self, report: &RoundReport) -> Duration {
        self.sync_ns = average(self.sync_ns, nanos(report.sync));
        self.last_producers = report.acknowledged.saturating_add(report.left_in_flight);
        if report.acknowledged == 1 {
            self.lone_rounds = self.lone_rounds.saturating_add(1);
        } else {
            self.lone_rounds = 0;
        }
        if self.lone_rounds >= LONE_ROUNDS {
            lone_spin(self.sync_ns, self.max_spin)
        } else {
            Duration::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(acknowledged: usize, sync_us: u64) -> RoundReport {
        RoundReport { acknowledged, left_in_flight: 0, sync: Duration::from_micros(sync_us) }
    }

    fn input() -> GatherInput {
        GatherInput { queued: 0, in_flight: 0, since_answers: Duration::ZERO }
    }

    fn back(us: u64) -> GatherOutcome {
        GatherOutcome { waited: Duration::from_micros(us), reached: true, since_answers: Duration::from_micros(us) }
    }

    #[test]
    fn waits_only_while_producers_come_back_faster_than_a_sync() {
        let max = Duration::from_micros(500);
        let mut p = AdaptiveGatherPolicy::new(max, Duration::from_micros(150));
        p.after_round(&round(4, 200));
        // Not measured yet: the bound.
        assert_eq!(p.before_sync(&input()), GatherDecision::WaitFor { queued: 4, within: max });
        // Back in 30 µs, syncs of 200 µs: wait, up to twice that.
        p.gathered(&back(30));
        assert_eq!(p.before_sync(&input()), GatherDecision::WaitFor { queued: 4, within: Duration::from_micros(60) });
        // Producers slower than a sync: sync now.
        let mut slow = AdaptiveGatherPolicy::new(max, Duration::from_micros(150));
        slow.after_round(&round(4, 100));
        slow.gathered(&back(400));
        assert_eq!(slow.before_sync(&input()), GatherDecision::Go);
        assert_eq!(slow.measured(), (Some(Duration::from_micros(100)), Some(Duration::from_micros(400))));
    }

    #[test]
    fn a_lone_producer_spins_no_longer_than_a_sync() {
        let mut p = AdaptiveGatherPolicy::new(Duration::from_micros(100), Duration::from_micros(150));
        let mut spin = Duration::ZERO;
        for _ in 0..LONE_ROUNDS {
            spin = p.after_round(&round(1, 40));
        }
        assert_eq!(spin, Duration::from_micros(75), "a fast disk: spin about a sync, 40 + 10 + 25");
        let mut slow = AdaptiveGatherPolicy::new(Duration::from_micros(100), Duration::from_micros(150));
        for _ in 0..LONE_ROUNDS {
            spin = slow.after_round(&round(1, 5000));
        }
        assert_eq!(spin, Duration::ZERO, "a sync past the bound: sleep at once");
        assert_eq!(p.before_sync(&input()), GatherDecision::Go, "a lone producer never waits");
    }
}
