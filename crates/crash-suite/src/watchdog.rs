//! The suite's watchdog: a run that never ends (a deadlock, a lost wake-up in
//! a race the layer forces) would otherwise hold CI until its time limit and
//! leave nothing to act on. Each layer marks the run it starts (layer and
//! seed); when one mark stays longer than the limit, the watchdog hands the
//! run to its `on_hang` action, which names it with the command that
//! reproduces it and ends the process. The process ends from the watchdog's
//! thread, so no destructor of the hung run's runs: what the suite leaves
//! outside the process (child processes, tmpfs mounts) is registered here
//! while it lives, and [`clean_up`] removes it first.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// What the suite holds outside the process: child processes and mounts.
struct Outside {
    children: Vec<u32>,
    mounts: Vec<PathBuf>,
}

static OUTSIDE: Mutex<Outside> = Mutex::new(Outside { children: Vec::new(), mounts: Vec::new() });

fn outside() -> MutexGuard<'static, Outside> {
    OUTSIDE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A child process of the suite runs (until [`child_ended`]).
pub fn child_started(pid: u32) {
    outside().children.push(pid);
}

/// The child `pid` was waited for.
pub fn child_ended(pid: u32) {
    outside().children.retain(|&p| p != pid);
}

/// A file system is mounted at `path` (until [`unmounted`]).
pub fn mounted(path: &Path) {
    outside().mounts.push(path.to_path_buf());
}

/// The file system at `path` is unmounted.
pub fn unmounted(path: &Path) {
    outside().mounts.retain(|p| p != path);
}

/// Kills the suite's live child processes and detaches its mounts (lazily:
/// a hung child may still hold them), for a process about to end without
/// running destructors. Best effort: what fails is printed.
pub fn clean_up() {
    let outside = outside();
    for pid in &outside.children {
        match Command::new("kill").args(["-KILL", &pid.to_string()]).status() {
            Ok(status) if status.success() => println!("  killed child process {pid}"),
            other => println!("  could not kill child process {pid}: {other:?}"),
        }
    }
    for mount in &outside.mounts {
        match Command::new("umount").arg("-l").arg(mount).status() {
            Ok(status) if status.success() => println!("  unmounted {}", mount.display()),
            other => println!("  could not unmount {}: {other:?}", mount.display()),
        }
    }
}

/// The run under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub layer: &'static str,
    pub seed: u64,
    since: Instant,
}

#[derive(Default)]
struct State {
    mark: Option<Mark>,
    stopped: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock is held (none can: no code runs under it
        // but assignments) must not silence the watchdog.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A handle to the watchdog's thread; clones mark the same runs. The thread
/// ends when the last handle is dropped.
#[derive(Clone)]
pub struct Watchdog {
    shared: Arc<Shared>,
    _stop: Arc<StopOnDrop>,
}

struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.lock().stopped = true;
        self.0.changed.notify_all();
    }
}

impl Watchdog {
    /// Starts the watchdog: `on_hang` runs (once, in the watchdog's thread)
    /// with the run that stayed marked longer than `limit`, and how long.
    pub fn start(limit: Duration, on_hang: impl FnOnce(Mark, Duration) + Send + 'static) -> Watchdog {
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), changed: Condvar::new() });
        let watched = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("crash-watchdog".into())
            .spawn(move || {
                if let Some((mark, ran)) = watch(&watched, limit) {
                    on_hang(mark, ran);
                }
            })
            .expect("spawn the crash suite's watchdog");
        Watchdog { _stop: Arc::new(StopOnDrop(Arc::clone(&shared))), shared }
    }

    /// A run of `layer` under `seed` starts now (ending the one before).
    pub fn mark(&self, layer: &'static str, seed: u64) {
        self.shared.lock().mark = Some(Mark { layer, seed, since: Instant::now() });
        self.shared.changed.notify_all();
    }

    /// The next run of the layer marked last starts now, under `seed`.
    pub fn mark_seed(&self, seed: u64) {
        let mut state = self.shared.lock();
        if let Some(mark) = state.mark.as_mut() {
            *mark = Mark { seed, since: Instant::now(), ..*mark };
        }
        drop(state);
        self.shared.changed.notify_all();
    }

    /// No run is under way (the suite is reporting).
    pub fn clear(&self) {
        self.shared.lock().mark = None;
        self.shared.changed.notify_all();
    }
}

/// Waits until a mark outlives `limit` (returned with how long it ran), or
/// the watchdog stops (`None`).
fn watch(shared: &Shared, limit: Duration) -> Option<(Mark, Duration)> {
    let mut state = shared.lock();
    loop {
        if state.stopped {
            return None;
        }
        let wait = match state.mark {
            Some(mark) => {
                let ran = mark.since.elapsed();
                if ran > limit {
                    return Some((mark, ran));
                }
                // Woken early by a new mark; else looks again when this one is due.
                limit.saturating_sub(ran).saturating_add(Duration::from_millis(1))
            }
            None => Duration::from_secs(3600),
        };
        state = shared.changed.wait_timeout(state, wait).unwrap_or_else(PoisonError::into_inner).0;
    }
}

/// The seeds of a layer's runs, each marked with the watchdog as it starts.
pub struct Seeds {
    pub(crate) seeds: std::vec::IntoIter<u64>,
    pub(crate) watchdog: Watchdog,
}

impl Iterator for Seeds {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let seed = self.seeds.next()?;
        self.watchdog.mark_seed(seed);
        Some(seed)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.seeds.size_hint()
    }
}

impl ExactSizeIterator for Seeds {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn reporting(limit: Duration) -> (Watchdog, mpsc::Receiver<(Mark, Duration)>) {
        let (tx, rx) = mpsc::channel();
        let watchdog = Watchdog::start(limit, move |mark, ran| {
            let _ = tx.send((mark, ran));
        });
        (watchdog, rx)
    }

    #[test]
    fn a_run_that_outlives_the_limit_is_named_with_its_layer_and_seed() {
        let (watchdog, hung) = reporting(Duration::from_millis(50));
        watchdog.mark("races", 0x5EED);
        let seeds = Seeds { seeds: vec![7, 8].into_iter(), watchdog: watchdog.clone() };
        assert_eq!(seeds.len(), 2);
        for seed in seeds.take(1) {
            assert_eq!(seed, 7);
        }
        let (mark, ran) = hung.recv_timeout(Duration::from_secs(10)).expect("the hung run reported");
        assert_eq!((mark.layer, mark.seed), ("races", 7));
        assert!(ran > Duration::from_millis(50), "reported after {ran:?}");
    }

    #[test]
    fn runs_that_end_in_time_and_a_cleared_mark_are_never_reported() {
        // Ten runs of 20 ms each, 200 ms in all, under a limit of 1 s a run.
        let (watchdog, hung) = reporting(Duration::from_secs(1));
        watchdog.mark("power-loss", 1);
        for seed in (Seeds { seeds: (2..12).collect::<Vec<_>>().into_iter(), watchdog: watchdog.clone() }) {
            assert!(seed >= 2);
            std::thread::sleep(Duration::from_millis(20));
        }
        watchdog.clear();
        assert!(hung.recv_timeout(Duration::from_millis(1500)).is_err(), "a run in time was reported");
    }

    #[test]
    fn clean_up_kills_the_children_still_registered() {
        let mut child = Command::new("sleep").arg("600").spawn().expect("spawn sleep");
        child_started(child.id());
        let mut done = Command::new("true").spawn().expect("spawn true");
        done.wait().expect("wait");
        child_started(done.id());
        child_ended(done.id());
        clean_up();
        let status = child.wait().expect("wait");
        child_ended(child.id());
        assert!(!status.success(), "the registered child was killed: {status:?}");
        assert!(outside().children.iter().all(|&p| p != child.id() && p != done.id()));
    }

    #[test]
    fn the_watchdog_stops_with_its_last_handle() {
        let (watchdog, hung) = reporting(Duration::from_secs(10));
        watchdog.mark("kill", 3);
        drop(watchdog);
        // The thread ended without a report: the sender is gone, no message came.
        assert_eq!(hung.recv_timeout(Duration::from_secs(10)), Err(mpsc::RecvTimeoutError::Disconnected));
    }
}
