//! The read-only inspection commands, `consume`, `verify` and `stat`, and the
//! repairs, `recover` and `forget-dir`: one file each, and what they share.

mod consume;
mod recover;
mod stat;
pub(crate) mod verify;

use std::path::PathBuf;

use clap::Args;
use commitlog::inspect::{self, Listing, Problem};
use serde::Serialize;

use crate::{existing_dir, CliError};

pub use consume::{consume, ConsumeArgs};
pub use recover::{forget_dir, recover, ForgetDirArgs, RecoverArgs};
pub use stat::{stat, StatArgs};
pub use verify::verify;

/// A store directory, and whether to print JSON.
#[derive(Args)]
pub struct DirArgs {
    /// Store directory.
    #[arg(long)]
    pub(crate) dir: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The store's segments, after checking the directory exists.
pub(crate) fn listing(dir: &std::path::Path) -> Result<Listing, CliError> {
    existing_dir(dir)?;
    Ok(inspect::list_segments(dir)?)
}

/// Exit 3 if there were `count` problems (already printed), as `verify` does.
pub(crate) fn problems_found(count: usize) -> Result<(), CliError> {
    match count {
        0 => Ok(()),
        n => Err(CliError::Problems(n)),
    }
}

/// A segment's file name.
pub(crate) fn name(path: &std::path::Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// A problem as `verify` and `stat` report it.
#[derive(Serialize)]
pub(crate) struct ProblemReport {
    pub(crate) file: String,
    pub(crate) offset: Option<u64>,
    pub(crate) message: String,
}

impl From<&Problem> for ProblemReport {
    fn from(p: &Problem) -> Self {
        ProblemReport { file: p.path.display().to_string(), offset: p.offset, message: p.message.clone() }
    }
}
