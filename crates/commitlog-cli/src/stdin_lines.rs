//! The lines of standard input, as `send` and `produce` read them: on a thread
//! of their own, so that Ctrl-C (or SIGTERM) ends the command as the end of
//! its input would, with every line it took put and acknowledged and the
//! store closed (no abort marker left behind), instead of killing it. Lines
//! read ahead (up to 1,024) and not taken when Ctrl-C came are not put.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use crate::CliError;

/// Lines read ahead of the command.
const READ_AHEAD: usize = 1024;

/// How often a wait for the next line looks at the Ctrl-C flag.
const STOP_POLL: Duration = Duration::from_millis(50);

/// Standard input's lines (each without its `\n`) until its end or Ctrl-C.
pub struct StdinLines {
    lines: Receiver<std::io::Result<Vec<u8>>>,
    stop: Arc<AtomicBool>,
}

impl StdinLines {
    /// Starts reading; Ctrl-C from now on ends the lines.
    pub fn read() -> Result<Self, CliError> {
        let stop = crate::stop_on_ctrl_c()?;
        let (tx, lines) = mpsc::sync_channel(READ_AHEAD);
        // Left blocked in its read when Ctrl-C ends the command: the process
        // exits around it.
        std::thread::Builder::new()
            .name("stdin".into())
            .spawn(move || {
                for line in std::io::stdin().lock().split(b'\n') {
                    let failed = line.is_err();
                    if tx.send(line).is_err() || failed {
                        return;
                    }
                }
            })
            .map_err(|source| CliError::Io { context: "starting the stdin reader".into(), source })?;
        Ok(StdinLines { lines, stop })
    }
}

impl Iterator for StdinLines {
    type Item = std::io::Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            // Looked at before each line: input that never pauses (`tail -f
            // | commitlog send`) still ends at Ctrl-C. Lines read ahead and
            // not taken were never put, nor acknowledged.
            if self.stop.load(Ordering::SeqCst) {
                return None;
            }
            match self.lines.recv_timeout(STOP_POLL) {
                Ok(line) => return Some(line),
                Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }
}
