//! Text output for people; the JSON shapes are in `shapes` (SPEC.md §10).

use std::borrow::Cow;
use std::fmt;
use std::io::{self, Write};
use std::sync::OnceLock;

use latch_client::{exit, ClientError, Entry, SessionStatus};

use crate::shapes::{self, ErrorJson};

/// Prints an error (and, with `--json`, a JSON error object on stdout); returns its
/// exit code. The message is escaped for a terminal ([`escape`], SPEC §10).
pub fn report_error(e: &ClientError, json: bool) -> i32 {
    if json {
        let _ = shapes::print(&ErrorJson::from(e));
    }
    err_line(&format!("latch: {}", escape(&e.to_string())));
    e.exit_code()
}

/// What went wrong with stdout, once (SPEC §10, "A broken stdout").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StdoutFailure {
    /// EPIPE: the reader is gone. Quiet, exit 141, as a tool killed by SIGPIPE.
    Closed,
    /// Any other write error (ENOSPC, EIO…): said on stderr, exit 13, and what
    /// stdout would have shown goes to stderr instead.
    Failed,
}

static STDOUT_FAILURE: OnceLock<StdoutFailure> = OnceLock::new();

/// Writes `bytes` to stdout and flushes; never panics. Returns whether they were
/// written. After the first failure nothing more is written to stdout: on EPIPE
/// the output is dropped, on any other error it goes to stderr, so the effect a
/// command already had is still reported (SPEC §10).
pub fn out_bytes(bytes: &[u8]) -> bool {
    if let Some(f) = STDOUT_FAILURE.get() {
        if *f == StdoutFailure::Failed {
            let _ = io::stderr().write_all(bytes);
        }
        return false;
    }
    let mut out = io::stdout().lock();
    let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) else {
        return true;
    };
    drop(out);
    let failure = if e.kind() == io::ErrorKind::BrokenPipe {
        StdoutFailure::Closed
    } else {
        StdoutFailure::Failed
    };
    if STDOUT_FAILURE.set(failure).is_ok() && failure == StdoutFailure::Failed {
        err_line(&format!(
            "latch: cannot write to stdout: {e}; its output follows on stderr"
        ));
        let _ = io::stderr().write_all(bytes);
    }
    false
}

/// One line on stdout ([`out_bytes`]).
pub fn out_line(line: &str) {
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(line);
    buf.push('\n');
    out_bytes(buf.as_bytes());
}

/// `println!` in this crate (main.rs shadows it): [`out_line`].
pub fn out_fmt(args: fmt::Arguments<'_>) {
    out_line(&args.to_string());
}

/// `eprintln!` and `eprint!` in this crate (main.rs shadows them): a failed write
/// to stderr is ignored, never a panic.
pub fn err_fmt(args: fmt::Arguments<'_>, newline: bool) {
    let mut s = args.to_string();
    if newline {
        s.push('\n');
    }
    let _ = io::stderr().write_all(s.as_bytes());
}

/// One line on stderr; never panics.
pub fn err_line(line: &str) {
    err_fmt(format_args!("{line}"), true);
}

/// Whether stdout still takes output (a loop that prints stops when not).
pub fn stdout_ok() -> bool {
    STDOUT_FAILURE.get().is_none()
}

/// The exit code, once the command is done: a command that succeeded but could
/// not write its output exits 141 (stdout closed) or [`STDOUT_FAILED`]; a failed
/// command keeps its own code (SPEC §10).
pub fn finish(code: i32) -> i32 {
    let _ = io::stdout().flush();
    match STDOUT_FAILURE.get() {
        Some(_) if code != exit::OK => code,
        Some(StdoutFailure::Closed) => STDOUT_CLOSED,
        Some(StdoutFailure::Failed) => STDOUT_FAILED,
        None => code,
    }
}

/// Exit code when stdout's reader is gone: 128 + SIGPIPE, as a shell reports a
/// tool killed by SIGPIPE (SPEC §10).
pub const STDOUT_CLOSED: i32 = 128 + libc::SIGPIPE;

/// Exit code when stdout failed otherwise (ENOSPC, EIO): the command's effect is
/// done and its output went to stderr (SPEC §10).
pub const STDOUT_FAILED: i32 = 13;

/// `s` made safe to print for a person, as GNU `ls -b` does: a backslash is
/// `\\`, ESC `\e`, TAB `\t`, LF `\n`, CR `\r`, BEL… as `\x07`, DEL `\x7f`, and the
/// C1 controls (U+0080 to U+009F, which some terminals obey) `\u{9b}`. Nothing
/// else changes; JSON is never escaped so (SPEC §10).
pub fn escape(s: &str) -> Cow<'_, str> {
    let plain = |c: char| c != '\\' && !c.is_control();
    if s.chars().all(plain) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\x1b' => out.push_str("\\e"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if u32::from(c) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The width to cut table rows to: the terminal's when stdout is one, else
/// `$COLUMNS` when set, else none (a pipe or a file gets whole rows).
pub fn width() -> Option<usize> {
    if let Ok(ws) = rustix::termios::tcgetwinsize(io::stdout()) {
        if ws.ws_col > 0 {
            return Some(usize::from(ws.ws_col));
        }
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c| c > 0)
}

/// The columns `s` takes in a terminal.
fn cells(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

/// `s` cut to `max` terminal columns, the last one `…` when cut.
pub fn cut(s: &str, max: usize) -> String {
    if cells(s) <= max {
        return s.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used + w + 1 > max {
            break;
        }
        used += w;
        out.push(c);
    }
    if max > 0 {
        out.push('…');
    }
    out
}

/// A table sized to its content, as `tmux ls` and `docker ps` print: every column
/// but the last is as wide as its widest cell (never cut); the last takes the
/// rest of the width, cut to it when there is one ([`width`]). Cells are escaped
/// ([`escape`]) as they are added.
#[derive(Debug)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows
            .push(cells.iter().map(|c| escape(c).into_owned()).collect());
    }

    /// The header and rows, one line each.
    pub fn render(&self, width: Option<usize>) -> Vec<String> {
        let n = self.header.len();
        let mut widths = vec![0; n];
        for row in std::iter::once(&self.header).chain(&self.rows) {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cells(cell));
            }
        }
        std::iter::once(&self.header)
            .chain(&self.rows)
            .map(|row| line(row, &widths, width))
            .collect()
    }
}

fn line(row: &[String], widths: &[usize], width: Option<usize>) -> String {
    let mut line = String::new();
    let mut used = 0;
    let last = widths.len().saturating_sub(1);
    for (i, (cell, &w)) in row.iter().zip(widths).enumerate() {
        if i == last {
            match width {
                Some(total) => line.push_str(&cut(cell, total.saturating_sub(used).max(1))),
                None => line.push_str(cell),
            }
        } else {
            line.push_str(cell);
            line.push_str(&" ".repeat(w - cells(cell) + 1));
            used += w + 1;
        }
    }
    line.trim_end().to_owned()
}

/// `argv` quoted as a shell would need it.
pub fn shell_join(argv: &[String]) -> String {
    argv.iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_quote(a: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_-./=:,+@%^".contains(c);
    if !a.is_empty() && a.chars().all(safe) {
        a.to_owned()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

/// An age such as `45s`, `3m`, `2h`, `5d` for a time `ms` since the epoch.
pub fn age(ms: u64) -> String {
    let s = latch_registry::now_ms().saturating_sub(ms) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// A time (ms since the epoch) in RFC 3339, local time, to the millisecond.
pub fn rfc3339_local(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(
            || format!("{ms}"),
            |t| {
                t.to_zoned(jiff::tz::TimeZone::system())
                    .strftime("%Y-%m-%dT%H:%M:%S%.3f%:z")
                    .to_string()
            },
        )
}

/// The `ls` table of `entries`.
pub fn ls_table(entries: &[Entry]) -> Table {
    let mut t = Table::new(&["ID", "STATUS", "AGE", "NAME", "COMMAND"]);
    for e in entries {
        t.row(match e {
            Entry::Session { record, status } => vec![
                record.id.to_string(),
                match status {
                    SessionStatus::Vanished
                        if latch_registry::reboot::died_with_machine(record) =>
                    {
                        "vanished(reboot)".into()
                    }
                    _ => status_word(status),
                },
                age(record.created_at_ms),
                record.display_name.clone().unwrap_or_else(|| "-".into()),
                shell_join(&record.command),
            ],
            Entry::Degraded { id, error } => vec![
                id.clone(),
                "degraded".into(),
                "-".into(),
                "-".into(),
                error.clone(),
            ],
        });
    }
    t
}

/// A status in one word: `running`, `exited(5)`, `killed(9)`, `vanished`…
pub fn status_word(status: &SessionStatus) -> String {
    match status {
        SessionStatus::Exited { code: Some(c), .. } => format!("exited({c})"),
        SessionStatus::Exited {
            signal: Some(s), ..
        } => format!("killed({s})"),
        other => other.name().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_quote_and_cut() {
        assert_eq!(
            shell_join(&["sh".into(), "-c".into(), "echo 'hi' $X".into()]),
            r#"sh -c 'echo '\''hi'\'' $X'"#
        );
        assert_eq!(shell_join(&["".into(), "a=b".into()]), "'' a=b");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
        let mut t = Table::new(&["ID", "X", "REST"]);
        t.row(vec!["a".into(), "long".into(), "0123456789".into()]);
        t.row(vec!["longid".into(), "b".into(), "z".into()]);
        assert_eq!(
            t.render(Some(17)),
            ["ID     X    REST", "a      long 0123…", "longid b    z"]
        );
        assert_eq!(t.render(None)[1], "a      long 0123456789");
        let ts = rfc3339_local(1_700_000_000_123);
        assert_eq!(ts.len(), "2023-11-14T22:13:20.123+00:00".len(), "{ts}");
        assert!(ts.contains(".123"), "{ts}");
    }

    #[test]
    fn control_characters_are_escaped_as_ls_b_does() {
        assert_eq!(escape("plain é 日本"), "plain é 日本");
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
        assert_eq!(
            escape("a\x1b]52;c;aGk=\x07b\x1b[2J\t\n\r\\\x7f\u{9b}"),
            r"a\e]52;c;aGk=\x07b\e[2J\t\n\r\\\x7f\u{9b}"
        );
        let mut t = Table::new(&["A", "B"]);
        t.row(vec!["\x1b[2J".into(), "x\ny".into()]);
        assert_eq!(t.render(None), ["A     B", r"\e[2J x\ny"]);
        assert_eq!(cut("日本語", 5), "日本…");
    }
}
