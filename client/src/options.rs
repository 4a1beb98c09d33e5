//! Options that name what a call does, instead of positional booleans.

/// How a snapshot's text is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PeekFormat {
    /// Plain text, as the screen shows it (SPEC.md §4.4).
    #[default]
    Plain,
    /// Text with colours and attributes as SGR escapes, one line per row, no
    /// cursor movement (safe to print into another terminal).
    Ansi,
}

/// How much of the terminal a snapshot covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PeekScope {
    /// The visible screen.
    #[default]
    Screen,
    /// The scrollback, then the visible screen.
    Scrollback,
}

/// What [`crate::Bound::peek`] returns. The default is plain text of the visible
/// screen, as `latch peek` prints it.
///
/// ```
/// use latch_client::{PeekFormat, PeekOptions, PeekScope};
///
/// let opts = PeekOptions::ansi().with_scope(PeekScope::Scrollback);
/// assert_eq!(opts.format, PeekFormat::Ansi);
/// assert_eq!(PeekOptions::default(), PeekOptions::plain());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PeekOptions {
    /// Plain text or ANSI.
    pub format: PeekFormat,
    /// The screen, or the scrollback and the screen.
    pub scope: PeekScope,
}

impl PeekOptions {
    /// Plain text of the visible screen.
    pub const fn plain() -> Self {
        Self {
            format: PeekFormat::Plain,
            scope: PeekScope::Screen,
        }
    }

    /// ANSI text of the visible screen.
    pub const fn ansi() -> Self {
        Self {
            format: PeekFormat::Ansi,
            scope: PeekScope::Screen,
        }
    }

    /// The same options with `format`.
    #[must_use]
    pub const fn with_format(mut self, format: PeekFormat) -> Self {
        self.format = format;
        self
    }

    /// The same options with `scope`.
    #[must_use]
    pub const fn with_scope(mut self, scope: PeekScope) -> Self {
        self.scope = scope;
        self
    }

    /// The PEEK frame's flags (SPEC.md §4.1): `(plain, full)`.
    pub(crate) fn flags(self) -> (bool, bool) {
        (
            self.format == PeekFormat::Plain,
            self.scope == PeekScope::Scrollback,
        )
    }
}

/// Whether an attached client may write (SPEC.md §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// Watch only: the daemon drops this client's input and resizes, and its size
    /// does not count towards the PTY's.
    ReadOnly,
    /// Input and resizes reach the program.
    ReadWrite,
}

impl AttachMode {
    pub(crate) fn read_only(self) -> bool {
        self == Self::ReadOnly
    }
}

/// What [`crate::Client::remove`] does with a session that is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RemoveMode {
    /// Refuse ([`crate::ClientError::Refused`]); remove only exited or vanished
    /// sessions.
    #[default]
    ExitedOnly,
    /// Kill it through a bound connection first (`latch rm --force`).
    Force,
}
