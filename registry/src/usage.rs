//! Resource figures of a session's processes, read from `/proc` only (SPEC.md
//! §10, `latch stats`). Nothing here signals anything.
//!
//! A session's processes are its program and every process whose terminal session
//! is the program's (the program is its session leader, §5.6), found as `kill`
//! finds them ([`crate::proc::session_members`]). A process that left the terminal
//! session (`setsid`, a daemonising double fork) is not counted.

use crate::proc::PidFd;

/// What one process uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcUsage {
    /// CPU time (user + system) of the process and of the children it reaped, ms.
    pub cpu_ms: u64,
    /// Resident set size, bytes.
    pub rss_bytes: u64,
    /// Proportional set size, bytes (`smaps_rollup`); `None` when unreadable.
    pub pss_bytes: Option<u64>,
}

/// What a session's processes use together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionUsage {
    /// How many processes.
    pub processes: u32,
    /// Their CPU time, ms ([`ProcUsage::cpu_ms`]).
    pub cpu_ms: u64,
    /// Their resident set sizes, summed, bytes.
    pub rss_bytes: u64,
    /// Their proportional set sizes, summed, bytes (`None`: one was unreadable).
    pub pss_bytes: Option<u64>,
}

impl SessionUsage {
    fn add(&mut self, p: ProcUsage) {
        self.processes = self.processes.saturating_add(1);
        self.cpu_ms = self.cpu_ms.saturating_add(p.cpu_ms);
        self.rss_bytes = self.rss_bytes.saturating_add(p.rss_bytes);
        self.pss_bytes = match (self.pss_bytes, p.pss_bytes) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            _ => None,
        };
    }
}

fn clock_ticks() -> u64 {
    Some(rustix::param::clock_ticks_per_second())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

fn page_size() -> u64 {
    u64::try_from(rustix::param::page_size())
        .ok()
        .filter(|&p| p > 0)
        .unwrap_or(4096)
}

/// The fields of a `/proc/PID/stat` line after the command name: index 0 is
/// field 3.
fn fields(stat: &str) -> Option<Vec<&str>> {
    let after = stat.get(stat.rfind(')')? + 1..)?;
    Some(after.split_whitespace().collect())
}

/// CPU ms (fields 14 to 17: utime, stime, cutime, cstime) and RSS bytes (field
/// 24) of a `/proc/PID/stat` line.
pub fn parse_cpu_rss(stat: &str) -> Option<(u64, u64)> {
    let f = fields(stat)?;
    let num = |field: usize| f.get(field - 3)?.parse::<u64>().ok();
    let ticks = num(14)? + num(15)? + num(16)? + num(17)?;
    let ms = ticks.saturating_mul(1000) / clock_ticks();
    Some((ms, num(24)?.saturating_mul(page_size())))
}

/// `Pss:` of a `smaps_rollup` text, bytes.
pub fn parse_pss(rollup: &str) -> Option<u64> {
    let line = rollup.lines().find(|l| l.starts_with("Pss:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb.saturating_mul(1024))
}

/// One process's usage, read while `fd` pins it: the figures count only when the
/// process is still alive after they were read (a pid is never reused before
/// its process is gone).
pub fn proc_usage(fd: &PidFd, with_pss: bool) -> Option<ProcUsage> {
    let pid = fd.pid();
    let stat = crate::proc::read_proc(&format!("/proc/{pid}/stat")).ok()?;
    let (cpu_ms, rss_bytes) = parse_cpu_rss(&stat)?;
    let pss_bytes = if with_pss {
        crate::proc::read_proc(&format!("/proc/{pid}/smaps_rollup"))
            .ok()
            .and_then(|r| parse_pss(&r))
    } else {
        None
    };
    fd.is_alive().then_some(ProcUsage {
        cpu_ms,
        rss_bytes,
        pss_bytes,
    })
}

/// The usage of the terminal session whose leader is `program` (proven by the
/// caller, [`crate::proc::prove`]): the program and its session's members, each
/// pinned by a pidfd. `None` when the program ended during the scan (its pid may
/// then name another session).
pub fn session_usage(program: &PidFd) -> Option<SessionUsage> {
    let members = crate::proc::session_members(program.pid());
    let mut total = SessionUsage {
        pss_bytes: Some(0),
        ..SessionUsage::default()
    };
    for fd in std::iter::once(program).chain(members.iter()) {
        if let Some(u) = proc_usage(fd, true) {
            total.add(u);
        }
    }
    program.is_alive().then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_units_of_proc_are_the_kernels() {
        // /proc counts CPU time in USER_HZ, 100 on Linux whatever the kernel's HZ.
        assert_eq!(clock_ticks(), 100);
        // Pages: the kernel's, as smaps reports them.
        let p = page_size();
        assert!(p.is_power_of_two() && p >= 4096, "{p}");
        let kib = std::fs::read_to_string("/proc/self/smaps")
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("KernelPageSize:")?
                    .trim()
                    .strip_suffix(" kB")?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .unwrap();
        assert_eq!(kib * 1024, p);
    }

    #[test]
    fn parses_stat_and_rollup() {
        // Fields 14-17 are 10 20 3 4 ticks; 24 (rss) is 5 pages.
        let line = "9 (a) b) S 1 9 9 0 -1 0 0 0 0 0 10 20 3 4 20 0 1 0 77 1000 5 0";
        let (ms, rss) = parse_cpu_rss(line).unwrap();
        assert_eq!(ms, 37 * 1000 / clock_ticks());
        assert_eq!(rss, 5 * page_size());
        assert_eq!(parse_cpu_rss("9 (x) S 1"), None);
        let rollup = "00400000-7fff ---p 00000000 00:00 0 [rollup]\nRss: 100 kB\nPss: 42 kB\n";
        assert_eq!(parse_pss(rollup), Some(42 * 1024));
        assert_eq!(parse_pss("Rss: 1 kB"), None);
    }

    #[test]
    fn our_own_usage_reads() {
        let me = PidFd::open(std::process::id()).unwrap();
        let u = proc_usage(&me, true).unwrap();
        assert!(u.rss_bytes > 0);
    }
}
