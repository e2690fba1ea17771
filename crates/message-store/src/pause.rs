//! Pause points for the tests of races: a thread that reaches an armed point
//! stops there until the test lets it go, so a test can run another call in
//! a window between two steps of a protocol without sleeping.

use std::sync::{Arc, Barrier};

use parking_lot::Mutex;

/// A point a thread may be stopped at; unarmed, reaching it does nothing.
#[derive(Debug, Default)]
pub(crate) struct Pause(Mutex<Option<Arc<Barrier>>>);

impl Pause {
    /// Arms the point for the next thread that reaches it (once). The test
    /// meets the returned barrier twice: when that thread has reached the
    /// point, and to let it go on.
    pub(crate) fn arm(&self) -> Arc<Barrier> {
        let barrier = Arc::new(Barrier::new(2));
        *self.0.lock() = Some(Arc::clone(&barrier));
        barrier
    }

    /// Where the paused thread stops, if the point is armed (disarming it).
    pub(crate) fn reached(&self) {
        let armed = self.0.lock().take();
        if let Some(barrier) = armed {
            barrier.wait(); // reached
            barrier.wait(); // let go
        }
    }
}
