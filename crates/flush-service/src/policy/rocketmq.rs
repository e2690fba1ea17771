//! RocketMQ's flush rule, the default of the periodic services.

use std::time::Duration;

use crate::{Decision, FlushPolicy, PolicyInput};

/// RocketMQ's rule: always run with `least_pages`, except once every
/// `thorough_interval` with 0 ("flush everything").
#[derive(Debug, Clone)]
pub struct RocketMqPolicy {
    least_pages: usize,
    thorough_interval: Duration,
    last_thorough: Option<Duration>,
}

impl RocketMqPolicy {
    /// `least_pages` normally, 0 once every `thorough_interval`.
    pub fn new(least_pages: usize, thorough_interval: Duration) -> Self {
        RocketMqPolicy { least_pages, thorough_interval, last_thorough: None }
    }
}

impl FlushPolicy for RocketMqPolicy {
    fn decide(&mut self, input: &PolicyInput) -> Decision {
        let thorough = match self.last_thorough {
            None => true,
            Some(last) => input.now.saturating_sub(last) >= self.thorough_interval,
        };
        if thorough {
            self.last_thorough = Some(input.now);
            Decision::Run { least_pages: 0 }
        } else {
            Decision::Run { least_pages: self.least_pages }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::at;

    #[test]
    fn rocketmq_policy_is_thorough_once_per_interval() {
        let mut p = RocketMqPolicy::new(4, Duration::from_secs(10));
        assert_eq!(p.decide(&at(0, 0, None)), Decision::Run { least_pages: 0 }, "first run is thorough");
        assert_eq!(p.decide(&at(500, 0, None)), Decision::Run { least_pages: 4 });
        assert_eq!(p.decide(&at(9_999, 0, None)), Decision::Run { least_pages: 4 });
        assert_eq!(p.decide(&at(10_000, 0, None)), Decision::Run { least_pages: 0 });
        assert_eq!(p.decide(&at(10_500, 0, None)), Decision::Run { least_pages: 4 });
    }
}
