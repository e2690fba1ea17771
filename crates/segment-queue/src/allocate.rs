//! Creating the next segment ahead of time, off the appender's path: RocketMQ's
//! `AllocateMappedFileService`.
//!
//! One background thread; one request in flight. Roll-over takes the prepared file
//! if it is the one wanted (waiting for it if it is being made), so the put path
//! never pays for `fallocate`, the directory fsync or the warm-up. A file whose
//! blocks are being written ([`crate::prepare`]) is handed over as far as it got:
//! the roll-over waits at most for one step of it, never for the rest.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mapped_file::{MappedFile, MappedFileError, Storage};
use parking_lot::{Condvar, Mutex};

use crate::prepare::{Interrupt, Preparer};
use crate::recycle::Spares;

#[derive(Default)]
struct State {
    /// Offset asked for, with the directory to make it in, not yet picked up by
    /// the thread.
    requested: Option<(u64, PathBuf)>,
    /// Offset the thread is creating now.
    in_progress: Option<u64>,
    /// A finished file (or the error making it) waiting to be taken.
    ready: Option<(u64, Result<MappedFile, MappedFileError>)>,
    /// A roll-over is waiting for the file in progress: stop preparing it.
    handover: bool,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

/// The preallocation service.
pub(crate) struct Allocator {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// How long roll-over waits for a segment being prepared.
    wait: Duration,
    /// Its segments have their blocks written before hand-over.
    prepares: bool,
}

/// What [`Allocator::take`] found.
pub(crate) enum Taken {
    /// The segment, prepared.
    Prepared(MappedFile),
    /// Preparing it failed (nothing of it is left on disk).
    Failed(MappedFileError),
    /// It was not asked for, or not started yet: the caller creates it itself.
    NotRequested,
    /// It is still being prepared after the wait; it will be ready for a later
    /// roll. Creating it in place now would collide with the file being made.
    StillPreparing,
}

impl Allocator {
    pub(crate) fn start(
        storage: Arc<dyn Storage>,
        file_size: usize,
        warm: Option<bool>,
        wait: Duration,
        spares: Arc<Spares>,
        limit_percent: Option<u32>,
        preparer: Option<Preparer>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), changed: Condvar::new() });
        let worker = Arc::clone(&shared);
        let prepares = preparer.is_some();
        let job = Job { storage, file_size, warm, spares, limit_percent, preparer };
        let thread =
            std::thread::Builder::new().name("AllocateMappedFileService".into()).spawn(move || run(&worker, &job))?;
        Ok(Allocator { shared, thread: Some(thread), wait, prepares })
    }

    /// Asks for the segment at `offset` to be prepared in `dir` (replacing an
    /// older request).
    pub(crate) fn request(&self, offset: u64, dir: PathBuf) {
        let mut state = self.shared.state.lock();
        let already = state.in_progress == Some(offset) || state.ready.as_ref().is_some_and(|(o, _)| *o == offset);
        if !already {
            state.requested = Some((offset, dir));
            self.shared.changed.notify_all();
        }
    }

    /// Takes the prepared segment at `offset`, waiting for it if it is being made.
    pub(crate) fn take(&self, offset: u64) -> Taken {
        let mut state = self.shared.state.lock();
        if state.requested.as_ref().is_some_and(|(o, _)| *o == offset) {
            // Not started yet: cheaper for the caller to make it than to wait.
            state.requested = None;
            return Taken::NotRequested;
        }
        if self.prepares && state.in_progress == Some(offset) {
            // Its blocks may be being written: take it as far as it got.
            state.handover = true;
            self.shared.changed.notify_all();
        }
        // A wait too long to add to now has no deadline.
        let deadline = std::time::Instant::now().checked_add(self.wait);
        while state.in_progress == Some(offset) {
            let timed_out = match deadline {
                Some(deadline) => self.shared.changed.wait_until(&mut state, deadline).timed_out(),
                None => {
                    self.shared.changed.wait(&mut state);
                    false
                }
            };
            if timed_out {
                tracing::warn!(offset, wait = ?self.wait, "timed out waiting for a preallocated segment");
                return Taken::StillPreparing;
            }
        }
        match state.ready.take() {
            Some((o, Ok(file))) if o == offset => Taken::Prepared(file),
            Some((o, Err(err))) if o == offset => Taken::Failed(err),
            Some((o, stale)) => {
                discard(o, stale);
                Taken::NotRequested
            }
            None => Taken::NotRequested,
        }
    }

    /// True when the segments it makes have their blocks written
    /// ([`crate::prepare`]).
    pub(crate) fn prepares(&self) -> bool {
        self.prepares
    }

    /// True once the segment at `offset` is prepared and waiting to be taken.
    #[cfg(test)]
    pub(crate) fn is_ready(&self, offset: u64) -> bool {
        self.shared.state.lock().ready.as_ref().is_some_and(|(o, made)| *o == offset && made.is_ok())
    }

    /// Drops every request and deletes a prepared file nobody took.
    pub(crate) fn discard(&self) {
        let mut state = self.shared.state.lock();
        state.requested = None;
        while state.in_progress.is_some() {
            self.shared.changed.wait(&mut state);
        }
        if let Some((o, file)) = state.ready.take() {
            discard(o, file);
        }
    }
}

fn discard(offset: u64, file: Result<MappedFile, MappedFileError>) {
    if let Ok(file) = file {
        if let Err(err) = file.destroy() {
            tracing::warn!(offset, %err, "could not delete unused preallocated segment");
        }
    }
}

/// Warms a new segment up; if that fails, deletes the file (a half-made segment
/// left behind would make every later creation of it fail with "file exists").
pub(crate) fn warm_or_remove(file: MappedFile, lock: bool) -> Result<MappedFile, MappedFileError> {
    match file.warm_up(lock) {
        Ok(_) => Ok(file),
        Err(err) => {
            if let Err(remove) = file.destroy() {
                tracing::error!(path = %file.path().display(), %remove, "could not delete a segment whose warm-up failed");
            }
            Err(err)
        }
    }
}

/// What the thread needs to make segments.
struct Job {
    storage: Arc<dyn Storage>,
    file_size: usize,
    warm: Option<bool>,
    spares: Arc<Spares>,
    limit_percent: Option<u32>,
    preparer: Option<Preparer>,
}

fn run(shared: &Shared, job: &Job) {
    let mut state = shared.state.lock();
    loop {
        if state.stop {
            return;
        }
        let Some((offset, dir)) = state.requested.take() else {
            shared.changed.wait(&mut state);
            continue;
        };
        if let Some((o, stale)) = state.ready.take() {
            discard(o, stale);
        }
        state.in_progress = Some(offset);
        state.handover = false;
        drop(state);
        let made = make(shared, job, offset, &dir);
        if let Some(Err(err)) = &made {
            tracing::warn!(offset, %err, "preallocating segment failed");
        }
        state = shared.state.lock();
        state.in_progress = None;
        state.handover = false;
        state.ready = made.map(|made| (offset, made));
        shared.changed.notify_all();
    }
}

/// The segment at `offset` in `dir`: a spare, or a new file (warmed up or
/// prepared, as configured); `None` when the disk has no room for it.
fn make(shared: &Shared, job: &Job, offset: u64, dir: &std::path::Path) -> Option<Result<MappedFile, MappedFileError>> {
    // A spare's blocks are written already: no warm-up, no preparation.
    if let Some(spare) = job.spares.take(dir, offset) {
        return Some(Ok(spare));
    }
    // Short of space: nothing is prepared; the roll-over looks again and
    // refuses with the disk named.
    if matches!(crate::space::room(&*job.storage, dir, job.file_size, job.limit_percent), crate::space::Room::No { .. })
    {
        return None;
    }
    let file = match create(&*job.storage, dir, offset, job.file_size, job.preparer.is_some()) {
        Ok(file) => file,
        Err(err) => return Some(Err(err)),
    };
    Some(match (job.warm, &job.preparer) {
        (Some(lock), _) => warm_or_remove(file, lock),
        (None, Some(preparer)) => preparer.prepare(file, |nap| {
            let mut state = shared.state.lock();
            if !nap.is_zero() && !state.handover && !state.stop {
                shared.changed.wait_for(&mut state, nap);
            }
            if state.stop {
                Some(Interrupt::Stop)
            } else if state.handover {
                Some(Interrupt::HandOver)
            } else {
                None
            }
        }),
        (None, None) => Ok(file),
    })
}

/// A new segment file. With the planted bug, its directory entry is left for a
/// later sync that nothing asks for: a prepared file trusted as a segment
/// though its creation was never made durable.
fn create(
    storage: &dyn Storage,
    dir: &std::path::Path,
    offset: u64,
    size: usize,
    prepared: bool,
) -> Result<MappedFile, MappedFileError> {
    #[cfg(planted_bugs)]
    if prepared && crate::planted::is_active(crate::planted::Bug::PreparedFileNotDurable) {
        return MappedFile::create_deferred(storage, dir, offset, size);
    }
    let _ = prepared;
    MappedFile::create(storage, dir, offset, size)
}

impl Drop for Allocator {
    fn drop(&mut self) {
        {
            let mut state = self.shared.state.lock();
            state.stop = true;
            state.requested = None;
            self.shared.changed.notify_all();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // RocketMQ destroys preallocated files that were never used.
        if let Some((o, file)) = self.shared.state.lock().ready.take() {
            discard(o, file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mapped_file::SimStorage;

    #[test]
    fn a_take_that_outwaits_preparation_says_so_and_a_later_take_gets_the_file() {
        // Roll-over once fell back to creating the file in place while the thread
        // was still making it, and failed with "file exists".
        let sim = SimStorage::new();
        sim.set_create_delay(Duration::from_millis(300));
        let dir = PathBuf::from("/a");
        let storage: Arc<dyn Storage> = Arc::new(sim.clone());
        let spares = Arc::new(Spares::new(Arc::clone(&storage), vec![dir.clone()], 0, 4096));
        let allocator = Allocator::start(storage, 4096, None, Duration::from_millis(10), spares, None, None).unwrap();
        allocator.request(4096, dir.clone());
        let started = std::time::Instant::now();
        while allocator.shared.state.lock().in_progress != Some(4096) {
            assert!(started.elapsed() < Duration::from_secs(10), "the thread never started");
            std::thread::yield_now();
        }
        assert!(matches!(allocator.take(4096), Taken::StillPreparing));
        let file = loop {
            match allocator.take(4096) {
                Taken::Prepared(file) => break file,
                Taken::StillPreparing => assert!(started.elapsed() < Duration::from_secs(10), "never prepared"),
                Taken::NotRequested => panic!("the prepared file was lost"),
                Taken::Failed(err) => panic!("{err}"),
            }
        };
        assert_eq!(file.file_from_offset(), 4096);
        assert!(sim.file_bytes(&dir.join(mapped_file::file_name(4096))).is_some());
    }
}
