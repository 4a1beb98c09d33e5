//! What the daemon knows of its program's output besides the screen (SPEC.md §4.2,
//! §4.6, §8): the output cursor, the newest output by cursor (the ring), the shell's
//! marks, and when the program last wrote. Fed eagerly with every byte the program
//! writes, before the emulator's lazy queue, so a STATUS or a CUT is never behind.

use bytes::Bytes;
use latch_screen::{Mark, ShellState, ShellTracker};
use latch_wire::limits::OUTPUT_RING_BYTES;
use latch_wire::{CutFacts, OutputFacts, OutputRange, ShellFacts, ShellPhase};

use crate::lease::Blocks;
use crate::ring::Ring;

/// The output log of one creation.
#[derive(Debug)]
pub(crate) struct OutputLog {
    ring: Ring,
    shell: ShellTracker,
    /// Scratch for the marks of one push (kept to reuse its allocation).
    marks: Vec<Mark>,
    last_output_ms: Option<u64>,
    /// The command blocks the marks delimit (SPEC §4.7).
    pub blocks: Blocks,
}

impl Default for OutputLog {
    fn default() -> Self {
        Self {
            ring: Ring::new(OUTPUT_RING_BYTES),
            shell: ShellTracker::new(),
            marks: Vec::new(),
            last_output_ms: None,
            blocks: Blocks::default(),
        }
    }
}

impl OutputLog {
    /// Output the program wrote at `now_ms`.
    pub fn push(&mut self, bytes: &[u8], now_ms: u64) {
        if bytes.is_empty() {
            return;
        }
        self.ring.push(bytes);
        self.marks.clear();
        self.shell.feed(bytes, &mut self.marks);
        self.last_output_ms = Some(now_ms);
        for m in &self.marks {
            self.blocks.mark(m, self.shell.cwd(), now_ms);
        }
    }

    /// Whether the program marks its prompts: an OSC 133 A has been read in this
    /// creation (C and D alone are what `run --marker` prints itself).
    pub fn marked(&self) -> bool {
        self.shell.prompts() > 0
    }

    /// The output cursor.
    pub fn cursor(&self) -> u64 {
        self.ring.cursor()
    }

    /// Frees the ring (SPEC §4.4 "Hibernation"): `since` answers with what it lost.
    pub fn free_ring(&mut self) {
        self.ring.free();
    }

    /// The shell's marks in the last push.
    pub fn marks(&self) -> &[Mark] {
        &self.marks
    }

    /// STATUS3's output facts.
    pub fn facts(&self) -> OutputFacts {
        OutputFacts {
            output_cursor: self.ring.cursor(),
            last_output_ms: self.last_output_ms,
            shell: self.shell_facts(),
        }
    }

    /// CUT's facts: where a stream's SCREEN was cut.
    pub fn cut(&self) -> CutFacts {
        CutFacts {
            cursor: self.ring.cursor(),
            shell: self.shell_facts(),
        }
    }

    /// OUTPUT_SINCE's answer: the held output after `since`, at most `max` bytes.
    pub fn since(&self, since: u64, max: usize) -> OutputRange {
        let found = self.ring.since(since);
        let mut bytes = found.bytes;
        bytes.truncate(max);
        OutputRange {
            start: found.start,
            dropped: found.dropped,
            end: self.ring.cursor(),
            bytes: Bytes::from(bytes),
        }
    }

    fn shell_facts(&self) -> ShellFacts {
        let (state, command) = match self.shell.state() {
            ShellState::Unknown => (ShellPhase::Unknown, None),
            ShellState::Prompt => (ShellPhase::Prompt, None),
            ShellState::Running { command } => (ShellPhase::Running, command.clone()),
        };
        ShellFacts {
            state,
            command,
            cwd: self.shell.cwd().map(str::to_owned),
            last_exit: self.shell.last_exit(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_counts_keeps_and_marks() {
        let mut log = OutputLog::default();
        assert_eq!(log.facts().last_output_ms, None);
        let (a, c): (&[u8], &[u8]) = (b"\x1b]133;A\x07$ ", b"\x1b]133;C;cmdline=ls\x07file\r\n");
        let total = (a.len() + c.len()) as u64;
        log.push(a, 5);
        assert_eq!(log.cut().shell.state, ShellPhase::Prompt);
        log.push(c, 7);
        let facts = log.facts();
        assert_eq!(facts.shell.state, ShellPhase::Running);
        assert_eq!(facts.shell.command.as_deref(), Some("ls"));
        assert_eq!(facts.last_output_ms, Some(7));
        assert_eq!(facts.output_cursor, total);
        let r = log.since(10, 3);
        assert_eq!((r.start, r.dropped, r.end), (10, 0, total));
        assert_eq!(&r.bytes[..], b"\x1b]1");
    }
}
