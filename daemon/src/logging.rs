//! Log lines and timestamps. The daemon's stderr is `<root>/<id>.log`; each line is
//! `<ISO-8601 UTC time> latch-daemon[<pid>]: <message>`. Input bytes are never logged.

use std::fmt;
use std::os::fd::AsFd;

/// Writes one log line to stderr (fd 2) in a single `write`, so lines from
/// successive daemons appending to one log never interleave. Used through the
/// crate's `log!` macro. Logging never fails the daemon.
pub(crate) fn line(args: fmt::Arguments<'_>) {
    let text = format!(
        "{} latch-daemon[{}]: {args}\n",
        iso8601_ms(latch_registry::now_ms()),
        std::process::id()
    );
    let _ = write_all_fd(std::io::stderr().as_fd(), text.as_bytes());
}

/// `write(2)` until everything is written, without std's stdio locks or buffers.
pub(crate) fn write_all_fd(
    fd: std::os::fd::BorrowedFd<'_>,
    mut bytes: &[u8],
) -> std::io::Result<()> {
    while !bytes.is_empty() {
        match nix::unistd::write(fd, bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = bytes.get(n..).unwrap_or_default(),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Formats milliseconds since the Unix epoch as ISO-8601 UTC with milliseconds, the
/// shape of JavaScript's `Date.prototype.toISOString` (`1970-01-01T00:00:00.000Z`),
/// which the legacy `pty` clients parse.
pub(crate) fn iso8601_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let millis = ms % 1000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day), after Howard
/// Hinnant's `civil_from_days`, restricted to non-negative day counts.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_table() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_700_000_000_123, "2023-11-14T22:13:20.123Z"),
            (4_107_542_399_999, "2100-02-28T23:59:59.999Z"),
            (1_709_251_199_000, "2024-02-29T23:59:59.000Z"),
        ];
        for (ms, want) in cases {
            assert_eq!(iso8601_ms(ms), want, "{ms}");
        }
    }
}
