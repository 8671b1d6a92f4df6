//! The terminal output: on a terminal, a status block redrawn in place below a
//! scrolling event log; otherwise plain log lines and a progress line now and then.

use std::io::Write;
use std::time::Duration;

use tokio::time::Instant;

/// Where the demo writes.
pub struct View {
    live: bool,
    /// Lines of the status block currently on screen (live mode).
    drawn: usize,
    start: Instant,
    last_plain_status: Option<Instant>,
    last_plain_summary: String,
}

impl View {
    /// A live view when `live` (a terminal), plain lines otherwise.
    pub fn new(live: bool) -> View {
        View {
            live,
            drawn: 0,
            start: Instant::now(),
            last_plain_status: None,
            last_plain_summary: String::new(),
        }
    }

    /// True for the live view (a terminal).
    pub fn is_live(&self) -> bool {
        self.live
    }

    fn stamp(&self) -> String {
        format!("{:>6.2}s", self.start.elapsed().as_secs_f64())
    }

    /// Prints one event log line (above the status block in live mode).
    pub fn log(&mut self, line: &str) {
        self.say(&format!("{} {line}", self.stamp()));
    }

    /// Prints a line without a timestamp (banner, summary).
    pub fn say(&mut self, line: &str) {
        let mut out = std::io::stdout().lock();
        if self.live {
            self.erase(&mut out);
        }
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    fn erase(&mut self, out: &mut impl Write) {
        if self.drawn > 0 {
            // Up to the block's first line, then clear to the end of the screen.
            let _ = write!(out, "\x1b[{}F\x1b[J", self.drawn);
            self.drawn = 0;
        }
    }

    /// Shows the status block: redrawn in place in live mode; in plain mode, its
    /// `summary` line every few seconds while it changes.
    pub fn status(&mut self, block: &[String], summary: &str) {
        if self.live {
            let mut out = std::io::stdout().lock();
            self.erase(&mut out);
            for line in block {
                let _ = writeln!(out, "\x1b[2K{line}");
            }
            self.drawn = block.len();
            let _ = out.flush();
        } else {
            let due = match self.last_plain_status {
                None => true,
                Some(t) => t.elapsed() >= Duration::from_secs(2),
            };
            if due && summary != self.last_plain_summary {
                self.last_plain_summary = summary.to_owned();
                self.last_plain_status = Some(Instant::now());
                self.log(summary);
            }
        }
    }

    /// Removes the status block (before the summary).
    pub fn finish(&mut self) {
        if self.live {
            let mut out = std::io::stdout().lock();
            self.erase(&mut out);
            let _ = out.flush();
        }
    }
}

/// A text progress bar of `width` cells.
pub fn bar(done: u64, total: u64, width: usize) -> String {
    let filled = (done.min(total) * width as u64)
        .checked_div(total)
        .map_or(width, |f| usize::try_from(f).unwrap_or(width));
    format!("[{}{}]", "#".repeat(filled), "·".repeat(width - filled))
}

/// A duration in seconds, two decimals: `1.25 s`.
pub fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// `n` and the word for it: `1 item`, `2 items`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
