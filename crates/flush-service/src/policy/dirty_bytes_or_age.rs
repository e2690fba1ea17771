//! An example flush policy: bounded dirty bytes and bounded age.

use std::time::Duration;

use crate::{Decision, FlushPolicy, PolicyInput};

/// Example policy: flush everything as soon as `max_dirty_bytes` are pending or
/// the oldest pending byte is older than `max_age`; otherwise wait. It bounds both
/// how much an async crash can lose and how stale it can be.
#[derive(Debug, Clone, Copy)]
pub struct DirtyBytesOrAgePolicy {
    /// Flush once this many bytes are pending.
    pub max_dirty_bytes: u64,
    /// Flush once bytes have been pending this long.
    pub max_age: Duration,
}

impl FlushPolicy for DirtyBytesOrAgePolicy {
    fn decide(&mut self, input: &PolicyInput) -> Decision {
        let too_many = input.pending_bytes >= self.max_dirty_bytes && input.pending_bytes > 0;
        let too_old = input.pending_age.is_some_and(|age| age >= self.max_age);
        if too_many || too_old {
            Decision::Run { least_pages: 0 }
        } else {
            Decision::Skip
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::at;

    #[test]
    fn dirty_bytes_or_age_policy_flushes_on_either_bound() {
        let mut p = DirtyBytesOrAgePolicy { max_dirty_bytes: 1 << 20, max_age: Duration::from_millis(200) };
        assert_eq!(p.decide(&at(0, 0, None)), Decision::Skip);
        assert_eq!(p.decide(&at(0, 1000, Some(100))), Decision::Skip);
        assert_eq!(p.decide(&at(0, 1 << 20, Some(1))), Decision::Run { least_pages: 0 });
        assert_eq!(p.decide(&at(0, 10, Some(200))), Decision::Run { least_pages: 0 });
    }
}
