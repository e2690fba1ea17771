//! The disk-space guard: RocketMQ's DISK_FULL running flag. A service thread
//! looks at the file system every `clean_resource_interval_ms`; once its used
//! share reaches `disk_space_warning_level_ratio` the log refuses appends with
//! [`Error::DiskFull`](crate::Error::DiskFull) (one atomic load per append, no
//! `statvfs`), and takes them again once it falls below. Reads, flushes and
//! segment deletion go on, so acknowledged records stay readable and space can
//! be freed. Appends stop before the disk is full, so no segment is ever created
//! into a full disk (which would be an error, never a SIGBUS, anyway).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flush_service::{ServiceState, ServiceThread};
use mapped_file::Storage;

/// The guard's state, shared by the appenders and the service thread.
#[derive(Debug)]
pub(crate) struct DiskGuard {
    full: AtomicBool,
    /// The last used share seen, in percent, as `f64` bits (NaN: unknown).
    used_percent: AtomicU64,
}

impl DiskGuard {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(DiskGuard { full: AtomicBool::new(false), used_percent: AtomicU64::new(f64::NAN.to_bits()) })
    }

    /// True while appends are refused.
    pub(crate) fn is_full(&self) -> bool {
        self.full.load(Ordering::Acquire)
    }

    /// The used share of the disk at the last look, in percent.
    pub(crate) fn used_percent(&self) -> Option<f64> {
        let used = f64::from_bits(self.used_percent.load(Ordering::Relaxed));
        (!used.is_nan()).then_some(used)
    }

    /// Looks at the disk once and sets the flag: full at or above `limit_percent`.
    /// A storage that cannot tell never makes the log full.
    pub(crate) fn check(&self, storage: &dyn Storage, dir: &std::path::Path, limit_percent: u32) {
        let used = match storage.disk_space(dir) {
            Ok(Some(space)) => space.used_percent(),
            Ok(None) => return,
            Err(err) => {
                tracing::warn!(dir = %dir.display(), %err, "cannot read the disk's free space");
                return;
            }
        };
        self.used_percent.store(used.to_bits(), Ordering::Relaxed);
        let full = used >= f64::from(limit_percent);
        if self.full.swap(full, Ordering::AcqRel) != full {
            if full {
                tracing::warn!(dir = %dir.display(), used, limit_percent, "disk full: appends are refused");
            } else {
                tracing::info!(dir = %dir.display(), used, limit_percent, "disk space back: appends are accepted");
            }
        }
    }
}

/// The service thread that keeps the guard current.
pub(crate) fn start_service(
    guard: Arc<DiskGuard>,
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    limit_percent: u32,
    interval: Duration,
) -> std::io::Result<ServiceThread> {
    ServiceThread::spawn("DiskSpaceGuard", ServiceState::new(), move |s| {
        while !s.is_stopped() {
            s.sleep(interval);
            guard.check(&*storage, &dir, limit_percent);
        }
    })
}
