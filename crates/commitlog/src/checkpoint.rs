//! The checkpoint file: how far the log is known durable, written crash-safely.
//!
//! ```text
//! 0          8                16                     24        28
//! +----------+----------------+----------------------+---------+
//! | CLCKPT01 | flushed offset | physic msg timestamp | crc32c  |
//! +----------+----------------+----------------------+---------+
//! ```
//!
//! Written as `checkpoint.tmp`, fsynced, renamed over `checkpoint`, then the
//! directory is fsynced: a crash leaves either the old or the new checkpoint, never
//! a mix. The flushed offset only ever comes from a flush that succeeded, so it is
//! never ahead of durable data.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::Error;

const MAGIC: &[u8; 8] = b"CLCKPT01";
const LEN: usize = 28;

/// The checkpoint's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Checkpoint {
    /// Offset below which every byte was durable when the checkpoint was written.
    pub flushed_offset: u64,
    /// Store timestamp (ms) of the newest durable record (RocketMQ's `physicMsgTimestamp`).
    pub physic_msg_timestamp: u64,
}

impl Checkpoint {
    /// The checkpoint file of a store directory.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join("checkpoint")
    }

    fn encode(&self) -> [u8; LEN] {
        let mut out = [0u8; LEN];
        out[..8].copy_from_slice(MAGIC);
        out[8..16].copy_from_slice(&self.flushed_offset.to_le_bytes());
        out[16..24].copy_from_slice(&self.physic_msg_timestamp.to_le_bytes());
        let crc = crc32c::crc32c(&out[..24]);
        out[24..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads the checkpoint of `dir`: `None` if there is none; an error naming the
    /// file if it is damaged.
    pub fn load(dir: &Path) -> Result<Option<Checkpoint>, Error> {
        let path = Self::path(dir);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(Error::Io { path, source }),
        };
        let damaged = |reason| Err(Error::Checkpoint { path: path.clone(), reason });
        if bytes.len() != LEN {
            return damaged("wrong length");
        }
        if &bytes[..8] != MAGIC {
            return damaged("not a checkpoint file (bad magic)");
        }
        let crc = u32::from_le_bytes(bytes[24..28].try_into().expect("4 bytes"));
        if crc != crc32c::crc32c(&bytes[..24]) {
            return damaged("CRC mismatch");
        }
        Ok(Some(Checkpoint {
            flushed_offset: u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")),
            physic_msg_timestamp: u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes")),
        }))
    }

    /// Writes the checkpoint of `dir` crash-safely.
    pub fn store(&self, dir: &Path) -> Result<(), Error> {
        let tmp = dir.join("checkpoint.tmp");
        let path = Self::path(dir);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { path, source }
        };
        let mut file = File::create(&tmp).map_err(io(&tmp))?;
        file.write_all(&self.encode()).map_err(io(&tmp))?;
        file.sync_all().map_err(io(&tmp))?;
        drop(file);
        fs::rename(&tmp, &path).map_err(io(&path))?;
        // The rename must survive a power cut too.
        mapped_file::sync_dir(dir).map_err(io(dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_detects_damage() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Checkpoint::load(dir.path()).unwrap(), None);
        let cp = Checkpoint { flushed_offset: 123, physic_msg_timestamp: 456 };
        cp.store(dir.path()).unwrap();
        assert_eq!(Checkpoint::load(dir.path()).unwrap(), Some(cp));
        assert!(!dir.path().join("checkpoint.tmp").exists());
        let mut bytes = fs::read(Checkpoint::path(dir.path())).unwrap();
        bytes[9] ^= 1;
        fs::write(Checkpoint::path(dir.path()), &bytes).unwrap();
        let err = Checkpoint::load(dir.path()).unwrap_err();
        assert!(err.to_string().contains("CRC mismatch"), "{err}");
        fs::write(Checkpoint::path(dir.path()), b"short").unwrap();
        assert!(Checkpoint::load(dir.path()).is_err());
    }
}
