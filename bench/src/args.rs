//! Command-line options of the bench binaries, parsed by `clap`. An unknown flag or a
//! bad value is refused with clap's message (exit status 2); cargo bench's `--bench`
//! is accepted and ignored.

use std::ffi::OsString;

use clap::{CommandFactory, FromArgMatches, Parser};
use liveness_core::Ttl;

/// A bench binary's command line: the options `T` and cargo bench's `--bench`.
#[derive(Debug, Parser)]
#[command(about = None, long_about = None)]
struct BenchCommandLine<T: clap::Args> {
    #[command(flatten)]
    options: T,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The options `T` of this process's command line, with the defaults of `T`
/// replaced by `defaults` (`(argument id, value)`, the id being the field's name).
/// On `--help` prints the help and exits with status 0; on an unknown flag or a bad
/// value prints clap's message and exits with status 2.
///
/// # Panics
///
/// When an id of `defaults` names no argument of `T` (a mistake in the binary).
pub fn parse<T: clap::Args>(defaults: &[(&'static str, &'static str)]) -> T {
    try_parse_from(defaults, std::env::args_os()).unwrap_or_else(|e| e.exit())
}

/// The options `T` of the command line `args` (the first being the program's name),
/// with `defaults` as [`parse`] takes them; clap's error when `args` are refused.
///
/// # Panics
///
/// As [`parse`] does.
pub fn try_parse_from<T, I, S>(
    defaults: &[(&'static str, &'static str)],
    args: I,
) -> Result<T, clap::Error>
where
    T: clap::Args,
    I: IntoIterator<Item = S>,
    S: Into<OsString> + Clone,
{
    let command = defaults
        .iter()
        .fold(BenchCommandLine::<T>::command(), |command, &(id, value)| {
            command.mut_arg(id, |arg| arg.default_value(value))
        });
    let matches = command.try_get_matches_from(args)?;
    BenchCommandLine::<T>::from_arg_matches(&matches).map(|c| c.options)
}

/// Reads a ttl given in milliseconds (`5000`): a valid [`Ttl`] or why not.
pub fn ttl_ms(text: &str) -> Result<Ttl, String> {
    let millis = text.parse::<u64>().map_err(|e| e.to_string())?;
    Ttl::from_millis(millis).map_err(|e| e.to_string())
}

/// Reads a count of at least one.
pub fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// The options the sessions benches share. A bench changes their defaults with
/// [`parse`]'s `defaults` (`("members", "100000")`).
#[derive(Clone, Debug, clap::Args)]
pub struct SessionOptions {
    /// How many members.
    #[arg(long, default_value_t = 10_000)]
    pub members: usize,
    /// How many sessions they ride (at least one).
    #[arg(long, default_value_t = 10, value_parser = at_least_one)]
    pub sessions: usize,
    /// The ttl of the sessions and of the members' own leases, in milliseconds.
    #[arg(long = "ttl-ms", value_name = "MS", default_value = "10000", value_parser = ttl_ms)]
    pub ttl: Ttl,
    /// The seconds of steady state.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Runs the lease-per-member comparison too, unless `--no-leases` is given.
    #[arg(long = "no-leases", action = clap::ArgAction::SetFalse)]
    pub leases: bool,
    /// Whether to measure only the join rates.
    #[arg(long)]
    pub joins_only: bool,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn session(defaults: &[(&'static str, &'static str)], text: &str) -> SessionOptions {
        let args = std::iter::once("bench").chain(text.split_whitespace());
        try_parse_from(defaults, args).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn session_options_have_defaults_a_bench_can_change() {
        let o = session(&[], "--bench");
        assert_eq!((o.members, o.sessions, o.seconds), (10_000, 10, 20));
        assert_eq!(o.ttl.duration(), Duration::from_secs(10));
        assert!(o.leases && !o.joins_only);
        let o = session(&[("members", "100"), ("ttl", "30000")], "--joins-only");
        assert_eq!((o.members, o.sessions), (100, 10));
        assert_eq!(o.ttl.duration(), Duration::from_secs(30));
        assert!(o.leases && o.joins_only);
        let o = session(
            &[("members", "100")],
            "--members 7 --no-leases --ttl-ms 2500",
        );
        assert_eq!((o.members, o.sessions), (7, 10));
        assert_eq!(o.ttl.duration(), Duration::from_millis(2500));
        assert!(!o.leases && !o.joins_only);
    }

    #[test]
    fn unknown_flags_and_bad_values_are_refused() {
        for text in [
            "--member 1000",
            "--members lots",
            "--members",
            "--sessions 0",
            "--ttl-ms 0",
            "--seconds -1",
            "stray",
        ] {
            let args = std::iter::once("bench").chain(text.split_whitespace());
            let refused = try_parse_from::<SessionOptions, _, _>(&[], args);
            assert!(refused.is_err(), "{text}");
        }
    }
}
