//! The switch every crate's planted bugs share (`--cfg planted_bugs` only).

/// Writes a crate's planted-bug switch: a process-wide `ACTIVE` bit set and
/// `activate(Option<Bug>)` / `is_active(Bug)` over it, for the crate's own
/// `Bug` enum (`#[repr(u16)]`, `Copy`, each variant one bit). The crash suite
/// switches one bug on at a time through `activate`; the crate's code asks
/// `is_active` where the bug is planted. Each crate keeps its own enum and so
/// its own switch: this crate knows none of their bugs.
///
/// Compiled only with `--cfg planted_bugs`, as the planted bugs are.
///
/// ```ignore
/// /// A planted bug of this crate.
/// #[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// #[repr(u16)]
/// pub enum Bug {
///     /// What goes wrong while it is on.
///     AckBeforeSync = 1,
///     /// The next one: the next bit.
///     TruncateLeavesTail = 2,
/// }
///
/// store_io::planted_switch!(Bug);
/// ```
#[macro_export]
macro_rules! planted_switch {
    ($bug:ty) => {
        static ACTIVE: ::std::sync::atomic::AtomicU16 = ::std::sync::atomic::AtomicU16::new(0);

        /// Switches one of this crate's bugs on (`Some`) or all off (`None`), process-wide.
        pub fn activate(bug: Option<$bug>) {
            ACTIVE.store(bug.map_or(0, |b| b as u16), ::std::sync::atomic::Ordering::SeqCst);
        }

        /// True while `bug` is switched on.
        pub fn is_active(bug: $bug) -> bool {
            ACTIVE.load(::std::sync::atomic::Ordering::SeqCst) & bug as u16 != 0
        }
    };
}

#[cfg(test)]
mod tests {
    /// A crate's bugs, as a crate declares them.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[repr(u16)]
    pub enum Bug {
        First = 1,
        Second = 2,
    }

    crate::planted_switch!(Bug);

    #[test]
    fn one_bug_at_a_time_and_all_off() {
        assert!(!is_active(Bug::First) && !is_active(Bug::Second));
        activate(Some(Bug::Second));
        assert!(!is_active(Bug::First) && is_active(Bug::Second));
        activate(Some(Bug::First));
        assert!(is_active(Bug::First) && !is_active(Bug::Second));
        activate(None);
        assert!(!is_active(Bug::First) && !is_active(Bug::Second));
    }
}
