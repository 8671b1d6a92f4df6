//! What the bench binaries read about processes from Linux's `/proc`: a process's
//! CPU time (user + system), the CPU of a server and its worker processes, and this
//! process's resident set. Every reader answers zero (or `None`) where the file is
//! missing or unreadable, so a bench still prints its other figures elsewhere.

use std::time::Duration;

/// Clock ticks per second of `/proc/<pid>/stat`'s times (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// The fields of `/proc/<pid>/stat` after the command name (which is in parentheses
/// and may hold spaces): `state` is index 0, `ppid` 1, `utime` 11 and `stime` 12.
/// Fields that are not numbers (the state) read as 0.
pub fn stat(pid: u32) -> Option<Vec<u64>> {
    fields(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn fields(stat: &str) -> Option<Vec<u64>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(
        rest.split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

/// The CPU time (user + system) in a `stat` line's fields.
fn cpu_of(fields: &[u64]) -> Duration {
    let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND)
}

/// The CPU time (user + system) process `pid` used so far; zero where unknown.
pub fn cpu(pid: u32) -> Duration {
    stat(pid).map_or(Duration::ZERO, |f| cpu_of(&f))
}

/// The CPU time (user + system) this process used so far; zero where unknown.
pub fn own_cpu() -> Duration {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| fields(&s))
        .map_or(Duration::ZERO, |f| cpu_of(&f))
}

/// The parent of process `pid`, where known.
pub fn parent(pid: u32) -> Option<u32> {
    stat(pid).and_then(|f| u32::try_from(*f.get(1)?).ok())
}

/// The CPU time (user + system) process `root` and its children used so far: a
/// server that forks a worker per connection (the postmaster and its backends).
pub fn family_cpu(root: u32) -> Duration {
    let mut total = Duration::ZERO;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if let Some(f) = stat(pid) {
            if pid == root || f.get(1) == Some(&u64::from(root)) {
                total += cpu_of(&f);
            }
        }
    }
    total
}

/// This process's resident set in bytes (`VmRSS` of `/proc/self/status`); zero
/// where unknown.
pub fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| vm_rss_kb(&s))
        .map_or(0, |kb| kb * 1024)
}

fn vm_rss_kb(status: &str) -> Option<u64> {
    let value = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    value.trim().trim_end_matches("kB").trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_a_command_name_with_spaces() {
        let line = "42 (my (odd) name) S 7 42 42 0 -1 4194560 10 0 0 0 250 30 0 0 20 0 1 0";
        let f = fields(line).unwrap_or_default();
        assert_eq!(f[1], 7, "ppid");
        assert_eq!(cpu_of(&f), Duration::from_millis(2_800));
        assert_eq!(fields("no name"), None);
    }

    #[test]
    fn resident_set_from_status() {
        let status = "Name:\tbench\nVmPeak:\t  9000 kB\nVmRSS:\t  1234 kB\n";
        assert_eq!(vm_rss_kb(status), Some(1234));
        assert_eq!(vm_rss_kb("Name:\tbench\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_read() {
        assert!(rss() > 0);
        let me = std::process::id();
        assert!(parent(me).is_some());
        assert!(cpu(me) <= family_cpu(me) + Duration::from_millis(50));
        let _ = own_cpu();
    }
}
