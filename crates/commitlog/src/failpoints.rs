//! Named fail points (feature `failpoints`, for the crash suite's race layer;
//! always in this crate's unit tests): a test registers an action for a point
//! and one store directory, and the log runs it once when it gets there. Without
//! the feature, the log's calls at its points are empty functions and nothing is
//! registered.
//!
//! Points:
//! - `flush_all.after_flush`: in [`CommitLog::flush_all`](crate::CommitLog::flush_all),
//!   after the flush returned and before the checkpoint hears of it (the window
//!   a concurrent `truncate_from` must not exploit).

#[cfg(any(test, feature = "failpoints"))]
mod points {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    type Action = Box<dyn FnOnce() + Send>;

    static ARMED: Mutex<Vec<(&'static str, PathBuf, Action)>> = Mutex::new(Vec::new());

    /// Runs `action` once, the next time the log of store `dir` reaches `point`.
    pub fn arm(point: &'static str, dir: &Path, action: impl FnOnce() + Send + 'static) {
        ARMED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((
            point,
            dir.to_path_buf(),
            Box::new(action),
        ));
    }

    pub(crate) fn hit(point: &str, dir: &Path) {
        let action = {
            let mut armed = ARMED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let at = armed.iter().position(|(p, d, _)| *p == point && d == dir);
            at.map(|at| armed.remove(at).2)
        };
        if let Some(action) = action {
            action();
        }
    }
}

#[cfg(any(test, feature = "failpoints"))]
pub use points::arm;
#[cfg(any(test, feature = "failpoints"))]
pub(crate) use points::hit;

/// Without the feature: nothing is ever armed.
#[cfg(not(any(test, feature = "failpoints")))]
#[inline(always)]
pub(crate) fn hit(_point: &str, _dir: &std::path::Path) {}
