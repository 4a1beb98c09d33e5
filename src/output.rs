//! Text output for people; the JSON shapes are in `shapes` (SPEC.md §10).

use latch_client::{ClientError, Entry, SessionStatus};

use crate::shapes::{self, ErrorJson};

/// Prints an error (and, with `--json`, a JSON error object on stdout); returns its
/// exit code.
pub fn report_error(e: &ClientError, json: bool) -> i32 {
    if json {
        let _ = shapes::print(&ErrorJson::from(e));
    }
    eprintln!("latch: {e}");
    e.exit_code()
}

/// The width to cut table rows to: the terminal's when stdout is one, else
/// `$COLUMNS`, else none (a pipe gets whole rows).
pub fn width() -> Option<usize> {
    if let Ok(ws) = rustix::termios::tcgetwinsize(std::io::stdout()) {
        if ws.ws_col > 0 {
            return Some(usize::from(ws.ws_col));
        }
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c| c > 0)
}

/// `s` cut to `max` characters, the last one `…` when cut.
pub fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    if max > 0 {
        out.push('…');
    }
    out
}

/// A table of fixed column widths: every column but the last is padded to its
/// width (a cell longer than its column is cut with `…`, except in `whole`
/// columns, which are never cut); the last column takes the rest of the terminal
/// width, cut to it.
pub struct Table {
    columns: Vec<(&'static str, usize)>,
    whole: Vec<usize>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(columns: &[(&'static str, usize)]) -> Self {
        Self {
            columns: columns.to_vec(),
            whole: Vec::new(),
            rows: Vec::new(),
        }
    }

    /// Marks column `i` as never cut (ids: no abbreviation can name a session).
    pub fn whole(mut self, i: usize) -> Self {
        self.whole.push(i);
        self
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn line(&self, cells: &[String], width: Option<usize>) -> String {
        let mut line = String::new();
        let last = self.columns.len() - 1;
        for (i, ((_, w), cell)) in self.columns.iter().zip(cells).enumerate() {
            if i == last {
                let used = line.chars().count();
                match width {
                    Some(total) => line.push_str(&cut(cell, total.saturating_sub(used).max(1))),
                    None => line.push_str(cell),
                }
            } else {
                let cell = if self.whole.contains(&i) {
                    cell.clone()
                } else {
                    cut(cell, *w)
                };
                line.push_str(&format!("{cell:<w$} "));
            }
        }
        line.trim_end().to_owned()
    }

    /// The header and rows, one line each.
    pub fn render(&self, width: Option<usize>) -> Vec<String> {
        let header: Vec<String> = self.columns.iter().map(|(h, _)| (*h).to_owned()).collect();
        std::iter::once(&header)
            .chain(&self.rows)
            .map(|r| self.line(r, width))
            .collect()
    }
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
    let mut t = Table::new(&[
        ("ID", 20),
        ("STATUS", 11),
        ("AGE", 4),
        ("NAME", 16),
        ("COMMAND", 0),
    ])
    .whole(0);
    for e in entries {
        t.row(match e {
            Entry::Session { record, status } => vec![
                record.id.to_string(),
                status_word(status),
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
        let mut t = Table::new(&[("ID", 4), ("X", 3), ("REST", 0)]).whole(0);
        t.row(vec!["a".into(), "long".into(), "0123456789".into()]);
        t.row(vec!["longid".into(), "b".into(), "z".into()]);
        assert_eq!(
            t.render(Some(14)),
            ["ID   X   REST", "a    lo… 0123…", "longid b   z"]
        );
        let ts = rfc3339_local(1_700_000_000_123);
        assert_eq!(ts.len(), "2023-11-14T22:13:20.123+00:00".len(), "{ts}");
        assert!(ts.contains(".123"), "{ts}");
    }
}
