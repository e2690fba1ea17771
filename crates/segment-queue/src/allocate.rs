//! Creating the next segment ahead of time, off the appender's path: RocketMQ's
//! `AllocateMappedFileService`.
//!
//! One background thread; one request in flight. Roll-over takes the prepared file
//! if it is the one wanted (waiting for it if it is being made), so the put path
//! never pays for `fallocate`, the directory fsync or the warm-up.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mapped_file::{MappedFile, MappedFileError, Storage};
use parking_lot::{Condvar, Mutex};

/// How long roll-over waits for a segment being prepared (RocketMQ waits 5 s).
const WAIT_FOR_PREPARED: Duration = Duration::from_secs(5);

#[derive(Default)]
struct State {
    /// Offset asked for and not yet picked up by the thread.
    requested: Option<u64>,
    /// Offset the thread is creating now.
    in_progress: Option<u64>,
    /// A finished file (or the error making it) waiting to be taken.
    ready: Option<(u64, Result<MappedFile, MappedFileError>)>,
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
}

impl Allocator {
    pub(crate) fn start(
        storage: Arc<dyn Storage>,
        dir: PathBuf,
        file_size: usize,
        warm: Option<bool>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), changed: Condvar::new() });
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("AllocateMappedFileService".into())
            .spawn(move || run(&worker, &*storage, &dir, file_size, warm))?;
        Ok(Allocator { shared, thread: Some(thread) })
    }

    /// Asks for the segment at `offset` to be prepared (replacing an older request).
    pub(crate) fn request(&self, offset: u64) {
        let mut state = self.shared.state.lock();
        let already = state.in_progress == Some(offset) || state.ready.as_ref().is_some_and(|(o, _)| *o == offset);
        if !already {
            state.requested = Some(offset);
            self.shared.changed.notify_all();
        }
    }

    /// Takes the prepared segment at `offset`, waiting for it if it is being made.
    /// `None` if it was not asked for (the caller creates it itself).
    pub(crate) fn take(&self, offset: u64) -> Option<Result<MappedFile, MappedFileError>> {
        let mut state = self.shared.state.lock();
        if state.requested == Some(offset) {
            // Not started yet: cheaper for the caller to make it than to wait.
            state.requested = None;
            return None;
        }
        let deadline = std::time::Instant::now() + WAIT_FOR_PREPARED;
        while state.in_progress == Some(offset) {
            if self.shared.changed.wait_until(&mut state, deadline).timed_out() {
                tracing::warn!(offset, "timed out waiting for a preallocated segment");
                return None;
            }
        }
        match state.ready.take() {
            Some((o, file)) if o == offset => Some(file),
            Some((o, stale)) => {
                discard(o, stale);
                None
            }
            None => None,
        }
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

fn run(shared: &Shared, storage: &dyn Storage, dir: &std::path::Path, file_size: usize, warm: Option<bool>) {
    let mut state = shared.state.lock();
    loop {
        if state.stop {
            return;
        }
        let Some(offset) = state.requested.take() else {
            shared.changed.wait(&mut state);
            continue;
        };
        if let Some((o, stale)) = state.ready.take() {
            discard(o, stale);
        }
        state.in_progress = Some(offset);
        drop(state);
        let made = MappedFile::create(storage, dir, offset, file_size).and_then(|file| {
            if let Some(lock) = warm {
                file.warm_up(lock)?;
            }
            Ok(file)
        });
        if let Err(err) = &made {
            tracing::warn!(offset, %err, "preallocating segment failed");
        }
        state = shared.state.lock();
        state.in_progress = None;
        state.ready = Some((offset, made));
        shared.changed.notify_all();
    }
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
