//! The run lease and the command blocks (SPEC §4.7).
//!
//! **The lease.** At most one connection holds it: `latch run` (and `send` with
//! its delivery options) takes it before typing, so two of them never type into
//! one shell at once; a second is answered LEASED with `granted: false` (busy).
//! It is not the registry lock: `kill`, `tag` and every other command stay
//! available while a run goes on. It ends with RELEASE or with its connection.
//! Once the session begins draining (kill, restart) the lease is revoked: its
//! holder is sent LEASED with `granted: false`, so a run never reports a
//! command as ended when its creation is being stopped under it.
//! An attached person's typing is not fenced off: it reaches the program as
//! always, as it would if they typed into a shell that runs a command.
//!
//! **Command blocks.** Every OSC 133 C opens a block, the next D closes it: the
//! command line, the working directory, when, the exit code and the output
//! cursors between them. The newest COMMANDS_KEPT are kept.

use std::cell::Cell;
use std::collections::VecDeque;

use latch_screen::{Mark, MarkKind};
use latch_wire::limits::COMMANDS_KEPT;
use latch_wire::CommandBlock;

/// The longest command line or directory kept in a block, in bytes.
const BLOCK_TEXT_MAX: usize = 4096;

/// Who holds the run lease: a connection id.
#[derive(Debug, Default)]
pub(crate) struct Lease {
    holder: Cell<Option<u64>>,
}

impl Lease {
    /// Takes the lease for connection `id`: `true` if it is now (or was already)
    /// its holder.
    pub fn take(&self, id: u64) -> bool {
        match self.holder.get() {
            None => {
                self.holder.set(Some(id));
                true
            }
            Some(h) => h == id,
        }
    }

    /// Whether a connection holds it.
    pub fn held(&self) -> bool {
        self.holder.get().is_some()
    }

    /// Takes the lease from whoever holds it (the session began draining).
    pub fn revoke(&self) -> Option<u64> {
        self.holder.take()
    }

    /// Gives the lease back if connection `id` holds it.
    pub fn give_back(&self, id: u64) {
        if self.holder.get() == Some(id) {
            self.holder.set(None);
        }
    }
}

/// The newest command blocks (module docs).
#[derive(Debug, Default)]
pub(crate) struct Blocks {
    blocks: VecDeque<CommandBlock>,
}

impl Blocks {
    /// A mark the shell tracker read (one that changed its state).
    pub fn mark(&mut self, m: &Mark, cwd: Option<&str>, now_ms: u64) {
        match &m.kind {
            MarkKind::CommandStart { command } => {
                if self.blocks.len() >= COMMANDS_KEPT {
                    self.blocks.pop_front();
                }
                self.blocks.push_back(CommandBlock {
                    command: command.as_deref().map(capped),
                    cwd: cwd.map(capped),
                    start_ms: now_ms,
                    end_ms: None,
                    exit: None,
                    output_start: m.end,
                    output_end: None,
                });
            }
            MarkKind::CommandEnd { exit } => {
                if let Some(b) = self.blocks.back_mut().filter(|b| b.end_ms.is_none()) {
                    b.end_ms = Some(now_ms);
                    b.exit = *exit;
                    b.output_end = Some(m.start);
                }
            }
            _ => {}
        }
    }

    /// The newest `last`, oldest first.
    pub fn last(&self, last: u32) -> Vec<CommandBlock> {
        let n = usize::try_from(last).unwrap_or(usize::MAX);
        let skip = self.blocks.len().saturating_sub(n);
        self.blocks.iter().skip(skip).cloned().collect()
    }
}

fn capped(s: &str) -> String {
    let mut end = s.len().min(BLOCK_TEXT_MAX);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// Whether the terminal's foreground process (the group leader of the program's
/// terminal) is asleep in a read, poll or select: waiting for input. Read from
/// `/proc/PGID/stat` and `/proc/PGID/wchan`; `false` when they cannot be read.
pub(crate) fn foreground_reading(child_pid: u32) -> bool {
    let Some((pgid, _)) = latch_registry::proc::foreground(child_pid) else {
        return false;
    };
    let Ok(stat) = latch_registry::proc::read_proc(&format!("/proc/{pgid}/stat")) else {
        return false;
    };
    // The state follows the command's closing parenthesis.
    let asleep = stat
        .rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'));
    let wchan = latch_registry::proc::read_proc(&format!("/proc/{pgid}/wchan")).unwrap_or_default();
    asleep
        && [
            "n_tty_read",
            "wait_woken",
            "poll_schedule_timeout",
            "do_select",
            "core_sys_select",
            "do_sys_poll",
            "do_epoll_wait",
            "ep_poll",
        ]
        .iter()
        .any(|w| wchan.starts_with(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(kind: MarkKind, start: u64, end: u64) -> Mark {
        Mark { kind, start, end }
    }

    #[test]
    fn blocks_open_at_c_close_at_d_and_keep_the_newest() {
        let mut b = Blocks::default();
        for i in 0..(COMMANDS_KEPT as u64 + 5) {
            let c = MarkKind::CommandStart {
                command: Some(format!("c{i}")),
            };
            b.mark(&mark(c, i * 100, i * 100 + 10), Some("/"), i);
            let d = MarkKind::CommandEnd { exit: Some(1) };
            b.mark(&mark(d, i * 100 + 50, i * 100 + 60), None, i + 1);
        }
        let all = b.last(u32::MAX);
        assert_eq!(all.len(), COMMANDS_KEPT);
        let newest = b.last(1);
        assert_eq!(newest[0].command.as_deref(), Some("c1004"));
        assert_eq!(newest[0].output_start, 100_410);
        assert_eq!(newest[0].output_end, Some(100_450));
        assert_eq!(newest[0].exit, Some(1));
    }

    #[test]
    fn the_lease_has_one_holder() {
        let l = Lease::default();
        assert!(l.take(1));
        assert!(l.take(1));
        assert!(!l.take(2));
        l.give_back(2);
        assert!(!l.take(2));
        l.give_back(1);
        assert!(l.take(2));
    }
}
