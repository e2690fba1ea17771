//! Progress on stderr for the long operations: a bar over segments, and a
//! spinner with the time spent around a step that says nothing until it
//! ends (a recovery, an open that dispatches again, a check). Drawn only
//! when stderr is a terminal: pipes, scripts and the tests see nothing of it,
//! and it is cleared before anything is printed after it.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar counting `count` segments as `verb` goes through them; finish it
/// with `finish_and_clear`.
pub(crate) fn segments(count: usize, verb: &str) -> ProgressBar {
    let bar = ProgressBar::new(count as u64);
    let template = format!("{verb} {{bar:30}} {{pos}}/{{len}} segments ({{elapsed}})");
    bar.set_style(ProgressStyle::with_template(&template).expect("valid template"));
    bar
}

/// Runs `work` under a spinner saying `what`, with the time spent so far.
pub(crate) fn step<T>(what: &str, work: impl FnOnce() -> T) -> T {
    let spinner = ProgressBar::new_spinner();
    spinner.set_style(ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("valid template"));
    spinner.set_message(what.to_string());
    spinner.enable_steady_tick(Duration::from_millis(200));
    let out = work();
    spinner.finish_and_clear();
    out
}

#[cfg(test)]
mod tests {
    use std::io::IsTerminal;

    #[test]
    fn progress_is_drawn_only_when_stderr_is_a_terminal() {
        let attended = std::io::stderr().is_terminal();
        let bar = super::segments(3, "scanning");
        assert_eq!(bar.is_hidden(), !attended);
        assert_eq!(super::step("a step", || 7), 7, "a step returns what its work does");
    }
}
