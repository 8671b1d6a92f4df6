//! Command-line options of the bench binaries: `--name number` pairs and bare
//! `--flag`s, looked up by name. Unknown arguments (cargo bench's `--bench`) are
//! ignored; where an option is given twice, the last one counts.

use std::str::FromStr;
use std::time::Duration;

use liveness_core::Ttl;

/// A bench binary's arguments.
#[derive(Clone, Debug, Default)]
pub struct Args {
    args: Vec<String>,
}

impl Args {
    /// The arguments of this process, without the program's name.
    pub fn from_env() -> Args {
        Args::new(std::env::args().skip(1))
    }

    /// These arguments (without a program's name).
    pub fn new<I, S>(args: I) -> Args
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Args {
            args: args.into_iter().map(Into::into).collect(),
        }
    }

    /// Whether the bare flag `name` (`--no-leases`) is given.
    pub fn flag(&self, name: &str) -> bool {
        self.args.iter().any(|a| a == name)
    }

    /// The number after the last `name` (`--members 10000`), or `default` when
    /// `name` is not given.
    ///
    /// # Panics
    ///
    /// When `name` is given without a number after it.
    pub fn number<T: FromStr>(&self, name: &str, default: T) -> T {
        match self.args.iter().rposition(|a| a == name) {
            None => default,
            Some(at) => self
                .args
                .get(at + 1)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} wants a number")),
        }
    }

    /// The word after the last `name` (`--synchronous full`), where given.
    pub fn text(&self, name: &str) -> Option<&str> {
        let at = self.args.iter().rposition(|a| a == name)?;
        self.args.get(at + 1).map(String::as_str)
    }

    /// The ttl given in milliseconds after `name` (`--ttl-ms 5000`), or `default`.
    ///
    /// # Panics
    ///
    /// When the number is missing or not a valid ttl.
    pub fn ttl_ms(&self, name: &str, default: Duration) -> Ttl {
        let millis = self.number(name, default.as_millis() as u64);
        Ttl::new(Duration::from_millis(millis)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }
}

/// The options the sessions benches share: `--members N`, `--sessions N` (at least
/// one), `--ttl-ms N`, `--seconds N` (of steady state), `--no-leases` (skip the
/// lease-per-member run) and `--joins-only` (only the join rates).
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// How many members.
    pub members: usize,
    /// How many sessions they ride.
    pub sessions: usize,
    /// The ttl of the sessions and of the members' own leases.
    pub ttl: Ttl,
    /// The seconds of steady state.
    pub seconds: u64,
    /// Whether to run the lease-per-member comparison too.
    pub leases: bool,
    /// Whether to measure only the join rates.
    pub joins_only: bool,
}

impl SessionOptions {
    /// `members` members in 10 sessions with a ttl of 10 s, 20 s of steady state,
    /// the lease-per-member run too.
    ///
    /// # Panics
    ///
    /// Never: 10 s is a valid ttl.
    pub fn defaults(members: usize) -> SessionOptions {
        SessionOptions {
            members,
            sessions: 10,
            ttl: Ttl::from_secs(10).unwrap_or_else(|e| panic!("{e}")),
            seconds: 20,
            leases: true,
            joins_only: false,
        }
    }

    /// These options, each overridden where `args` give it.
    ///
    /// # Panics
    ///
    /// As [`Args::number`] and [`Args::ttl_ms`] do.
    pub fn with_args(self, args: &Args) -> SessionOptions {
        SessionOptions {
            members: args.number("--members", self.members),
            sessions: args.number("--sessions", self.sessions).max(1),
            ttl: args.ttl_ms("--ttl-ms", self.ttl.duration()),
            seconds: args.number("--seconds", self.seconds),
            leases: self.leases && !args.flag("--no-leases"),
            joins_only: self.joins_only || args.flag("--joins-only"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Args {
        Args::new(text.split_whitespace())
    }

    #[test]
    fn numbers_and_flags_by_name_the_last_counts() {
        let a = args("--bench --members 5 --seconds 2 --no-leases --members 7");
        assert_eq!(a.number("--members", 1usize), 7);
        assert_eq!(a.number("--seconds", 20u64), 2);
        assert_eq!(a.number("--others", 20usize), 20);
        assert!(a.flag("--no-leases"));
        assert!(!a.flag("--joins-only"));
    }

    #[test]
    fn ttl_in_milliseconds_with_a_default() {
        let a = args("--ttl-ms 2500");
        let ttl = a.ttl_ms("--ttl-ms", Duration::from_secs(10));
        assert_eq!(ttl.duration(), Duration::from_millis(2500));
        let ttl = args("").ttl_ms("--ttl-ms", Duration::from_secs(10));
        assert_eq!(ttl.duration(), Duration::from_secs(10));
    }

    #[test]
    fn a_word_after_its_name() {
        assert_eq!(
            args("--synchronous full").text("--synchronous"),
            Some("full")
        );
        assert_eq!(args("--synchronous").text("--synchronous"), None);
    }

    #[test]
    fn session_options_override_their_defaults() {
        let o = SessionOptions::defaults(100).with_args(&args("--sessions 0 --joins-only"));
        assert_eq!((o.members, o.sessions, o.seconds), (100, 1, 20));
        assert_eq!(o.ttl.duration(), Duration::from_secs(10));
        assert!(o.leases && o.joins_only);
        let o = SessionOptions::defaults(100).with_args(&args("--members 7 --no-leases"));
        assert_eq!((o.members, o.sessions), (7, 10));
        assert!(!o.leases && !o.joins_only);
    }

    #[test]
    #[should_panic(expected = "--members wants a number")]
    fn a_missing_number_is_refused() {
        args("--members --seconds 3").number("--members", 1usize);
    }

    #[test]
    #[should_panic(expected = "--ttl-ms")]
    fn an_invalid_ttl_is_refused() {
        args("--ttl-ms 0").ttl_ms("--ttl-ms", Duration::from_secs(10));
    }
}
