//! The run lease and command blocks of version 3 (SPEC.md §4.1, §4.2, §4.7):
//! LEASE / RELEASE and LEASED, COMMANDS and its answer.

use serde::{Deserialize, Serialize};

use crate::frame::OutputFacts;

/// LEASED's fields (SPEC.md §4.2): whether the run lease was granted, and what a
/// client that types needs to know, read by the daemon at that moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseFacts {
    /// The lease is this connection's (false: another connection holds it).
    pub granted: bool,
    /// The daemon started its program with latch's shell integration (SPEC.md §4.6).
    pub integration: bool,
    /// The program marks its prompts: an OSC 133 A has been read in this
    /// creation's output.
    pub marked: bool,
    /// The program enabled bracketed paste (mode 2004).
    pub bracketed_paste: bool,
    /// The terminal's foreground process is blocked reading it (SPEC.md §4.7).
    pub reading: bool,
    /// The output cursor, last output and shell.
    pub output: OutputFacts,
}

/// One command the shell marked (SPEC.md §4.7): from its OSC 133 C to its D.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandBlock {
    /// The command line, when the shell said it.
    pub command: Option<String>,
    /// The working directory the shell last reported before it started.
    pub cwd: Option<String>,
    /// When its C was read, milliseconds since the Unix epoch.
    pub start_ms: u64,
    /// When its D was read (`None`: still running).
    pub end_ms: Option<u64>,
    /// The exit code its D carried.
    pub exit: Option<i32>,
    /// The output cursor just after its C: its output starts here.
    pub output_start: u64,
    /// The output cursor of its D's first byte (`None`: still running).
    pub output_end: Option<u64>,
}
