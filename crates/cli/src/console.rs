//! What a person sees: a progress bar on a terminal, plain lines otherwise. Nothing here can
//! stop a run: a closed stdout (`resmem train … | head -1`) only silences it.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

static QUIET: AtomicBool = AtomicBool::new(false);

/// Silences (`true`) or restores every line and bar of this process: for a program that runs
/// commands in-process by the thousand, such as a test, whose log they would flood.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::SeqCst);
}

pub(crate) fn quiet() -> bool {
    QUIET.load(Ordering::SeqCst)
}

/// `println!` for the whole CLI (which denies `println!` itself): a closed or full stdout
/// (`resmem count … | head -c1`, `> /dev/full`) silences the output and never stops the work.
macro_rules! out {
    () => {
        $crate::console::say("")
    };
    ($($t:tt)*) => {
        $crate::console::say(&format!($($t)*))
    };
}

/// Writes a line to stdout, ignoring a broken pipe or any other write error.
pub fn say(text: &str) {
    if quiet() {
        return;
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// Writes a line to stderr, ignoring write errors.
pub fn warn(text: &str) {
    if quiet() {
        return;
    }
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

pub struct Console {
    bar: Option<ProgressBar>,
}

impl Console {
    /// A bar over steps `done..total` when stdout is a terminal.
    pub fn new(done: u64, total: u64) -> Self {
        if quiet() || !std::io::stdout().is_terminal() {
            return Self { bar: None };
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stdout());
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} steps  eta {eta}  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_position(done);
        bar.reset_eta();
        Self { bar: Some(bar) }
    }

    pub fn is_bar(&self) -> bool {
        self.bar.is_some()
    }

    /// A line above the bar, or on its own.
    pub fn line(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => say(text),
        }
    }

    /// Moves the bar to `step` with `status` (loss, val loss, tokens/s).
    pub fn progress(&self, step: u64, status: &str) {
        if let Some(bar) = &self.bar {
            bar.set_position(step);
            bar.set_message(status.to_string());
        }
    }

    /// Removes the bar; the lines printed above it stay.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
