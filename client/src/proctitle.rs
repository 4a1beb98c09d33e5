//! A forked daemon's command line (SPEC §9.6): the creating process's argv (its
//! `--env` values among them) overwritten in place, as setproctitle(3) does.
//!
//! `/proc/PID/cmdline` shows the argv area `[arg_start, arg_end)`; when that area's
//! last byte is not NUL, the kernel takes it for a title set this way and shows the
//! string from `arg_start` up to its first NUL, which may run on into the
//! environment strings' area just after. So the title is written as one string, and
//! the area's last byte is made non-NUL. A title longer than the argv area first
//! moves every environment string to the heap (`strdup`, as glibc's setenv copies
//! them), then extends into the environment's area.

use std::os::raw::c_char;

extern "C" {
    /// The C library's environment (`environ(7)`).
    static mut environ: *mut *mut c_char;
}

/// The process's argv and environment areas, from `/proc/self/stat` (fields 48 to
/// 51: arg_start, arg_end, env_start, env_end).
#[derive(Debug, Clone, Copy)]
struct Areas {
    arg_start: usize,
    arg_end: usize,
    env_start: usize,
    env_end: usize,
}

fn areas() -> Option<Areas> {
    let stat = std::fs::read("/proc/self/stat").ok()?;
    // The name (field 2) is in parentheses and may hold spaces or parentheses.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    // Field 3 is the first after the name.
    let mut fields = rest.split_ascii_whitespace().skip(48 - 3);
    let mut next = || fields.next()?.parse::<usize>().ok();
    let a = Areas {
        arg_start: next()?,
        arg_end: next()?,
        env_start: next()?,
        env_end: next()?,
    };
    (a.arg_start < a.arg_end && a.env_start <= a.env_end).then_some(a)
}

/// Sets the title `/proc/self/cmdline` shows (at most the argv and environment
/// areas less one byte; a longer title is cut). Returns false, with nothing
/// written, when `/proc/self/stat` does not give the areas.
#[must_use]
pub(crate) fn set(title: &[u8]) -> bool {
    let Some(a) = areas() else { return false };
    let argv_len = a.arg_end - a.arg_start;
    // The environment's area counts only where the kernel reads on into it.
    let end = if title.len() >= argv_len && a.env_start == a.arg_end && move_environment(a) {
        a.env_end
    } else {
        a.arg_end
    };
    let len = end - a.arg_start;
    let shown = title.len().min(len - 1);
    // SAFETY: [arg_start, end) is this process's argv area (and, when `end` is
    // env_end, its environment area, which no environ entry points into any more):
    // mapped and writable, on the initial stack. Any pointer still into it (the Rust
    // runtime's saved argv) keeps reading NUL-terminated strings, since the area is
    // NUL-filled but for the title and the last argv byte, and a NUL ends the area.
    unsafe {
        let area = std::slice::from_raw_parts_mut(a.arg_start as *mut u8, len);
        area[..shown].copy_from_slice(&title[..shown]);
        area[shown..].fill(0);
        // Non-NUL: the kernel shows the title up to its NUL, not the whole area.
        let last = argv_len - 1;
        if area[last] == 0 && last > shown {
            area[last] = b' ';
        }
    }
    true
}

/// Moves every environment string inside the two areas to the heap. False (and
/// nothing moved for good) if a copy fails.
fn move_environment(a: Areas) -> bool {
    let inside = |p: *mut c_char| (a.arg_start..a.env_end).contains(&(p as usize));
    // SAFETY: one thread (the caller forked it); `environ` is the C library's
    // NULL-terminated array, and each entry replaced by a copy of the same string is
    // what setenv(3) does. The copies are never freed: the environment owns them.
    unsafe {
        let env = environ;
        if env.is_null() {
            return true;
        }
        let mut i = 0;
        while !(*env.add(i)).is_null() {
            let p = *env.add(i);
            if inside(p) {
                let copy = libc::strdup(p);
                if copy.is_null() {
                    return false;
                }
                *env.add(i) = copy;
            }
            i += 1;
        }
    }
    true
}
