//! The default gather policy: wait for the producers the last round served.

use std::time::Duration;

use crate::{GatherDecision, GatherInput, GatherPolicy, RoundReport};

/// Rounds in a row serving one request each before a waiter spins.
pub const LONE_ROUNDS: u64 = 8;

/// Before a round's sync, waits up to `max_gather` until as many requests wait
/// as there were producers at the end of the last round: the ones it
/// acknowledged, which usually come back within microseconds (on few cores they
/// need the CPU to do it), plus the ones it left in flight (bytes written after
/// its sync began). A sync started before they are back would serve one or two,
/// and the rest would wait a whole round; counting only the ones acknowledged
/// split a few producers into two groups that alternated for good, each sync
/// serving half. A lone producer never waits.
///
/// Once [`LONE_ROUNDS`] rounds in a row acknowledged one request each, a new
/// request's blocking wait spins for its answer about as long as a sync
/// usually takes ([`lone_spin`]), and the service spins as long for the
/// producer's next request: a thread put to sleep and woken costs tens of
/// microseconds on a virtual machine, a tenth of a durable batch. With a few
/// producers some rounds serve one too; a spinning waiter would take the CPU
/// the others need, so one such round is not enough.
#[derive(Debug, Clone)]
pub struct ProducersBackPolicy {
    max_gather: Duration,
    spin: Duration,
    /// Producers at the end of the last round (acknowledged and left in flight).
    last_producers: usize,
    /// Rounds in a row that acknowledged exactly one request.
    lone_rounds: u64,
    /// Moving average of a round's sync, in nanoseconds (0: not measured yet).
    sync_ns: u64,
}

impl ProducersBackPolicy {
    /// Waits at most `max_gather`; spins at most `spin` for a lone producer.
    pub fn new(max_gather: Duration, spin: Duration) -> Self {
        ProducersBackPolicy { max_gather, spin, last_producers: 0, lone_rounds: 0, sync_ns: 0 }
    }

    /// True while the last rounds served a lone producer.
    pub fn serving_a_lone_producer(&self) -> bool {
        self.lone_rounds >= LONE_ROUNDS
    }
}

/// An exponential moving average with weight 1/8 for the new sample.
pub(crate) fn average(old: u64, sample: u64) -> u64 {
    if old == 0 {
        return sample.max(1);
    }
    let old = u128::from(old);
    u64::try_from((old * 7 + u128::from(sample)) / 8).unwrap_or(u64::MAX).max(1)
}

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// How long a lone producer's wait spins, given the usual sync (`sync_ns`, a
/// moving average) and the bound `max_spin`: a quarter more than the usual
/// sync plus 25 µs, so the answer of a usual round lands inside the spin; zero
/// when that exceeds the bound, because a spin that ends before the answer
/// burns a CPU and pays the wake-up anyway (a slow disk's waiter sleeps at once).
pub fn lone_spin(sync_ns: u64, max_spin: Duration) -> Duration {
    let expected = Duration::from_nanos(sync_ns.saturating_add(sync_ns / 4).saturating_add(25_000));
    if sync_ns == 0 || expected > max_spin {
        Duration::ZERO
    } else {
        expected
    }
}

/// The queue length that brings back every producer of the last round, if any
/// wait is worth it: none for a lone producer, or when those in flight are them all.
pub(crate) fn producers_back(last_producers: usize, input: &GatherInput) -> Option<usize> {
    if last_producers <= 1 {
        return None;
    }
    last_producers.checked_sub(input.in_flight).filter(|w| *w > 0)
}

impl GatherPolicy for ProducersBackPolicy {
    fn before_sync(&mut self, input: &GatherInput) -> GatherDecision {
        match producers_back(self.last_producers, input) {
            Some(queued) if !self.max_gather.is_zero() => GatherDecision::WaitFor { queued, within: self.max_gather },
            _ => GatherDecision::Go,
        }
    }

    fn after_round(&mut self, report: &RoundReport) -> Duration {
        self.sync_ns = average(self.sync_ns, nanos(report.sync));
        // Acknowledged producers queue their next requests on the write list, and
        // those left in flight are still in flight: neither is counted twice.
        self.last_producers = report.acknowledged.saturating_add(report.left_in_flight);
        if report.acknowledged == 1 {
            self.lone_rounds = self.lone_rounds.saturating_add(1);
        } else {
            self.lone_rounds = 0;
        }
        if self.serving_a_lone_producer() {
            lone_spin(self.sync_ns, self.spin)
        } else {
            Duration::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(acknowledged: usize, left_in_flight: usize) -> RoundReport {
        RoundReport { acknowledged, left_in_flight, sync: Duration::from_micros(200) }
    }

    fn input(queued: usize, in_flight: usize) -> GatherInput {
        GatherInput { queued, in_flight, since_answers: Duration::ZERO }
    }

    #[test]
    fn waits_for_the_producers_the_last_round_served_and_left_but_never_for_a_lone_one() {
        let mut p = ProducersBackPolicy::new(Duration::from_micros(100), Duration::from_micros(150));
        p.after_round(&round(1, 0));
        assert_eq!(p.before_sync(&input(0, 0)), GatherDecision::Go, "a lone producer never waits");
        p.after_round(&round(2, 2));
        let within = Duration::from_micros(100);
        assert_eq!(p.before_sync(&input(0, 2)), GatherDecision::WaitFor { queued: 2, within });
        assert_eq!(p.before_sync(&input(0, 4)), GatherDecision::Go, "all of them in flight");
        let mut never = ProducersBackPolicy::new(Duration::ZERO, Duration::ZERO);
        never.after_round(&round(4, 0));
        assert_eq!(never.before_sync(&input(0, 0)), GatherDecision::Go);
    }

    #[test]
    fn spins_only_after_a_run_of_lone_rounds_about_as_long_as_a_sync() {
        let mut p = ProducersBackPolicy::new(Duration::from_micros(100), Duration::from_micros(1000));
        for _ in 1..LONE_ROUNDS {
            assert_eq!(p.after_round(&round(1, 0)), Duration::ZERO);
        }
        // Syncs of 200 µs: 250 + 25.
        assert_eq!(p.after_round(&round(1, 0)), Duration::from_micros(275));
        assert_eq!(p.after_round(&round(2, 0)), Duration::ZERO, "a round of two ends the run");
    }

    #[test]
    fn a_spin_that_cannot_outlast_the_usual_sync_is_not_spun() {
        assert_eq!(lone_spin(0, Duration::from_micros(1000)), Duration::ZERO, "not measured");
        assert_eq!(lone_spin(40_000, Duration::from_micros(1000)), Duration::from_micros(75));
        assert_eq!(lone_spin(780_000, Duration::from_micros(1000)), Duration::from_micros(1000), "at the bound");
        assert_eq!(
            lone_spin(800_000, Duration::from_micros(1000)),
            Duration::ZERO,
            "1,025 µs past the bound: sleep at once"
        );
    }
}
