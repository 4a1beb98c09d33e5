//! latch-client: everything the `latch` command line does, as a library, for tools
//! that need server-enforced identity (agent supervisors, CI runners,
//! orchestrators).
//!
//! # The guarantee
//!
//! **An action reaches exactly the session creation it was meant for, or
//! nothing.** Every creation gets an immutable, HMAC-derived [`Incarnation`]; a
//! [`SessionRef`] is `ID@INCARNATION`. Every effect goes either through a
//! connection the daemon has bound to that exact creation (SPEC.md §5.2), or
//! through a registry operation that compares the incarnation and acts under the
//! same lock (SPEC.md §9.11). A tool that keeps a [`SessionRef`] (or a [`Receipt`])
//! and acts on it later can never act on a different session created under the
//! same id in the meantime: it gets [`ClientError::Replaced`] instead.
//!
//! # The typestate
//!
//! [`Client`] is a handle on one registry root: create, list, resolve, and the
//! conditional operations (patch, kill, remove, restart, gc). Effects on a running
//! program go through a connection whose type says what it may do:
//!
//! - [`Connection`]: connected, the daemon's uid checked, a version negotiated
//!   (HELLO). It may only ask [`Connection::status`].
//! - [`Bound`] ([`Client::connect`], or [`Connection::bind`]): bound to exactly one
//!   creation; [`Bound::peek`], [`Bound::send`], [`Bound::resize`],
//!   [`Bound::signal`], [`Bound::stop`].
//! - [`Attached`] ([`Bound::attach`]): the consistent screen cut, then the live
//!   stream, split into an [`AttachReader`] and an [`AttachWriter`].
//!
//! # Errors and exit codes
//!
//! Every fallible call returns [`ClientError`]: typed, never a panic, and the same
//! error the CLI reports for the same input. [`ClientError::exit_code`] is the
//! CLI's exit code and [`ClientError::kind`] its stable `--json` name:
//!
//! | code | constant | meaning |
//! |---|---|---|
//! | 0 | [`exit::OK`] | success |
//! | 1 | [`exit::OTHER`] | any other error |
//! | 2 | [`exit::USAGE`] | bad input ([`ClientError::Usage`]) |
//! | 3 | [`exit::NOT_FOUND`] | no such session |
//! | 4 | [`exit::REPLACED`] | the id now holds another creation |
//! | 5 | [`exit::AMBIGUOUS`] | a display name matches several sessions |
//! | 6 | [`exit::BUSY`] | a lock is held elsewhere, or the session is draining |
//! | 7 | [`exit::UNREACHABLE`] | the daemon cannot be reached, or a read degraded ([`UnreachableCause`]) |
//! | 8 | [`exit::PROTOCOL`] | protocol or version mismatch ([`Mismatch`]) |
//! | 9 | [`exit::REFUSED`] | refused: permissions, an unsafe root, policy |
//! | 10 | [`exit::TIMED_OUT`] | a wait ended without what it waited for ([`ClientError::TimedOut`]) |
//! | 11 | [`exit::RECEIPT_NOT_WRITTEN`] | the session was created but its receipt could not be written |
//! | 12 | [`exit::NOT_OWNER`] | the owner precondition failed ([`Client::with_owner`]) |
//!
//! # Blocking and async
//!
//! Everything on [`Client`] and the connection types above blocks the calling
//! thread, with timeouts ([`conn::DEFAULT_TIMEOUT`] per answer). Registry
//! operations are short file operations under a flock, except the ones that wait
//! by design: [`Client::create`] (until the daemon is ready), [`Client::kill`] with
//! a wait, [`Client::wait_for_text`], [`EventFollower::next_event`].
//!
//! With the `tokio` feature, `latch_client::nonblocking` has the same typestate
//! for tokio (`nonblocking::Connection` → `nonblocking::Bound` →
//! `nonblocking::Attached`), reached through `Client::connect_async`, and
//! `Client::wait_for_text_async`, and `nonblocking::wait` and `nonblocking::run` (the
//! blocking waits and runs on tokio's blocking pool): one runtime can drive hundreds
//! of sessions. The
//! protocol handling is shared with the blocking connections (the wire crate is
//! sans-IO): only the byte moving differs. Registry operations stay blocking; call
//! them from `tokio::task::spawn_blocking` when they may wait.
//!
//! # Flows
//!
//! The examples below run against real daemons in a scratch registry (the hidden
//! lines make one; `latch` is the path of the `latch` binary, which starts
//! daemons). `client/examples/` has whole programs: a supervisor and a watcher.
//!
//! ## Open a registry, create a session, keep its receipt
//!
//! ```
//! # mod doc { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest_support.rs")); }
//! # use doc::*;
//! # let scratch = Scratch::new();
//! # let (root, latch) = (scratch.root(), latch_program());
//! use latch_client::{Client, NewSession, SessionId, Verdict};
//!
//! let client = Client::open(root, latch)?;
//! let mut new = NewSession::default();
//! new.id = Some(SessionId::new("build")?);
//! new.command = vec!["sh".into(), "-c".into(), "echo building; exec cat".into()];
//! let created = client.create(new)?;
//!
//! let receipt_path = root.join("build.receipt");
//! client.write_receipt(&receipt_path, &created)?;
//! let (verdict, _, _) = client.verify_receipt(&receipt_path);
//! assert_eq!(verdict, Verdict::Current);
//! assert_eq!(client.load_receipt(&receipt_path)?.session(), created.session());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Connect, bind, peek and send
//!
//! ```
//! # mod doc { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest_support.rs")); }
//! # use doc::*;
//! # let (_scratch, client) = scratch_client();
//! use latch_client::{NewSession, PeekOptions, PeekScope};
//!
//! let mut new = NewSession::default();
//! new.command = vec!["cat".into()];
//! let session = client.create(new)?.session();
//!
//! // A reference the CLI would take (id, unique display name, ID@INCARNATION)
//! // resolves to exactly one creation.
//! let target = client.resolve(&session.to_string(), None)?;
//! assert_eq!(target.session, session);
//!
//! let mut bound = client.connect(&session)?;
//! bound.send(b"hello\n")?; // returns once the daemon wrote it to the terminal
//! assert_eq!(bound.status()?.incarnation, session.incarnation);
//! let screen = bound.peek(PeekOptions::ansi().with_scope(PeekScope::Scrollback))?;
//! # let _ = screen;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Wait for text
//!
//! ```
//! # mod doc { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest_support.rs")); }
//! # use doc::*;
//! # let (_scratch, client) = scratch_client();
//! use std::time::Duration;
//! use latch_client::{exit, ClientError, NewSession, PeekOptions};
//!
//! let mut new = NewSession::default();
//! new.command = vec!["sh".into(), "-c".into(), "echo READY; exec cat".into()];
//! let session = client.create(new)?.session();
//!
//! let screen = client.wait_for_text(&session, "READY", PeekOptions::plain(), Duration::from_secs(10))?;
//! assert!(String::from_utf8_lossy(&screen).contains("READY"));
//!
//! // Text that never comes: a typed timeout, with an exit code of its own.
//! match client.wait_for_text(&session, "NEVER", PeekOptions::plain(), Duration::from_millis(200)) {
//!     Err(e @ ClientError::TimedOut(_)) => assert_eq!(e.exit_code(), exit::TIMED_OUT),
//!     other => panic!("{other:?}"),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Conditional tag and kill by receipt, when the session was replaced
//!
//! ```
//! # mod doc { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest_support.rs")); }
//! # use doc::*;
//! # let (scratch, client) = scratch_client();
//! use std::time::Duration;
//! use latch_client::{exit, ClientError, KillOutcome, MetaPatch, NewSession, SessionId};
//!
//! let mut new = NewSession::default();
//! new.id = Some(SessionId::new("web")?);
//! new.command = vec!["cat".into()];
//! let created = client.create(new)?;
//! let receipt = scratch.root().join("web.receipt");
//! client.write_receipt(&receipt, &created)?;
//! let mine = created.session();
//!
//! // Tag only while `web` is still this creation (compare and act under one lock).
//! let mut patch = MetaPatch::default();
//! patch.tags.insert("team".into(), Some("web".into()));
//! let done = client.patch(&mine.id, Some(&mine.incarnation), &patch)?;
//! assert_eq!(done.changed, ["tags.team"]);
//!
//! // Someone restarts `web`: same id, new creation.
//! let successor = client.restart(&mine, Duration::from_secs(5))?;
//! assert_ne!(successor.incarnation, mine.incarnation);
//!
//! // The tag and the kill by receipt now fail closed; the successor is untouched.
//! let by_receipt = client.load_receipt(&receipt)?.session();
//! for outcome in [
//!     client.patch(&mine.id, Some(&mine.incarnation), &patch).map(|_| ()),
//!     client.kill(&by_receipt, libc::SIGTERM, Some(Duration::from_secs(5))).map(|_| ()),
//! ] {
//!     match outcome {
//!         Err(ClientError::Replaced { actual, .. }) => {
//!             assert_eq!(actual, Some(successor.incarnation));
//!         }
//!         other => panic!("expected Replaced, got {other:?}"),
//!     }
//! }
//! let err = client.kill(&by_receipt, libc::SIGTERM, None).unwrap_err();
//! assert_eq!(err.exit_code(), exit::REPLACED);
//!
//! // Acting on the creation we do hold works, and says what it achieved.
//! let outcome = client.kill(&successor.session(), libc::SIGTERM, Some(Duration::from_secs(5)))?;
//! assert_eq!(outcome, KillOutcome::Killed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Follow events
//!
//! ```
//! # mod doc { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest_support.rs")); }
//! # use doc::*;
//! # let (_scratch, client) = scratch_client();
//! use std::time::Duration;
//! use latch_client::{EventScope, NewSession};
//!
//! let mut new = NewSession::default();
//! new.command = vec!["cat".into()];
//! let session = client.create(new)?.session();
//!
//! let mut events = client.follow_events(EventScope::Creation(session.clone()))?;
//! let first = events.next_event(Some(Duration::from_secs(10)))?.expect("session_start");
//! assert_eq!(first.kind(), "session_start");
//!
//! client.kill(&session, libc::SIGTERM, Some(Duration::from_secs(5)))?;
//! let mut kinds = Vec::new();
//! while let Some(ev) = events.next_event(Some(Duration::from_secs(10)))? {
//!     kinds.push(ev.kind().to_owned());
//!     if ev.kind() == "session_exit" {
//!         break;
//!     }
//! }
//! assert!(kinds.contains(&"kill_requested".to_owned()), "{kinds:?}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## An attach stream
//!
//! ```
//! # mod doc { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest_support.rs")); }
//! # use doc::*;
//! # let (_scratch, client) = scratch_client();
//! use latch_client::{AttachEvent, AttachMode, NewSession};
//!
//! let mut new = NewSession::default();
//! new.command = vec!["cat".into()];
//! let session = client.create(new)?.session();
//!
//! let attached = client.connect(&session)?.attach(24, 80, AttachMode::ReadWrite)?;
//! let (mut reader, mut writer) = (attached.reader, attached.writer);
//! // `attached.screen` repaints a terminal as the session looked at the cut.
//! writer.input(b"ping\n")?;
//! let mut seen = Vec::new();
//! loop {
//!     match reader.next_event()? {
//!         AttachEvent::Output(bytes) => {
//!             seen.extend_from_slice(&bytes);
//!             if String::from_utf8_lossy(&seen).matches("ping").count() >= 2 {
//!                 break; // the terminal's echo and cat's copy
//!             }
//!         }
//!         AttachEvent::Exit(status) => panic!("ended: {status:?}"),
//!         _ => {}
//!     }
//! }
//! writer.detach()?;
//! while reader.next_event()? != AttachEvent::Detached {}
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## gc and its report
//!
//! ```
//! # mod doc { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest_support.rs")); }
//! # use doc::*;
//! # let (_scratch, client) = scratch_client();
//! use std::time::Duration;
//! use latch_client::{EventScope, GcAction, GcOptions, NewSession};
//!
//! let mut new = NewSession::default();
//! new.command = vec!["true".into()];
//! let session = client.create(new)?.session();
//! // `true` exits at once; wait for its daemon to record the exit.
//! let mut events = client.follow_events(EventScope::Creation(session.clone()))?;
//! while let Some(ev) = events.next_event(Some(Duration::from_secs(10)))? {
//!     if ev.kind() == "session_exit" {
//!         break;
//!     }
//! }
//!
//! let mut opts = GcOptions::default();
//! opts.dry_run = true;
//! let report = client.gc(&opts)?;
//! assert_eq!(report[0].action, GcAction::WouldRemove);
//!
//! opts.dry_run = false;
//! let report = client.gc(&opts)?;
//! assert_eq!((report[0].id.as_str(), report[0].action), (session.id.as_str(), GcAction::Removed));
//! assert!(client.list()?.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Bad input gets a typed error
//!
//! ```
//! # mod doc { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest_support.rs")); }
//! # use doc::*;
//! # let (scratch, client) = scratch_client();
//! use std::os::unix::fs::PermissionsExt;
//! use latch_client::{exit, Client, ClientError, SessionId, SessionRef};
//!
//! // An empty id, a malformed incarnation: parse errors, and usage errors (exit 2)
//! // from every call that takes a reference.
//! assert!(SessionId::new("").is_err());
//! assert!("build@not-an-incarnation".parse::<SessionRef>().is_err());
//! assert_eq!(client.resolve("", None).unwrap_err().exit_code(), exit::USAGE);
//! let e = client.resolve("build@not-an-incarnation", None).unwrap_err();
//! assert!(matches!(e, ClientError::Usage(_)), "{e}");
//!
//! // A root others can read is refused (exit 9), and says how to fix it.
//! let open = scratch.root().join("open");
//! std::fs::create_dir(&open)?;
//! std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755))?;
//! let e = Client::open(&open, latch_program()).unwrap_err();
//! assert_eq!((e.exit_code(), e.kind()), (exit::REFUSED, "refused"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A connection whose daemon has gone answers every later request with
//! [`ClientError::Unreachable`] ([`UnreachableCause::Closed`] or
//! [`UnreachableCause::Io`], exit 7):
//!
//! ```
//! # mod doc { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest_support.rs")); }
//! # use doc::*;
//! # let (_scratch, client) = scratch_client();
//! use std::time::Duration;
//! use latch_client::{exit, NewSession, PeekOptions};
//!
//! let mut new = NewSession::default();
//! new.command = vec!["cat".into()];
//! let session = client.create(new)?.session();
//! let mut held = client.connect(&session)?;
//! client.kill(&session, libc::SIGKILL, Some(Duration::from_secs(5)))?;
//! let e = held.peek(PeekOptions::plain()).unwrap_err();
//! assert_eq!(e.exit_code(), exit::UNREACHABLE, "{e}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What it does not do: parse command lines, print, or touch a terminal.

#![deny(missing_docs)]

// The bridge's request line (SPEC.md §12.2), shared with the fuzz targets.
mod location;
#[doc(hidden)]
pub mod remote;
pub use location::{Found, Location, There};
mod client;
mod conn;
mod create;
mod error;
mod events;
mod forked;
mod proctitle;
// Entry points for the fuzz targets in fuzz/ (not a public API).
mod deliver;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod lifecycle;
mod meta;
mod names;
#[cfg(feature = "tokio")]
pub mod nonblocking;
mod options;
pub mod parallel;
mod proto;
mod receipt;
mod supervise;
pub use supervise::{shown_status, KEPT_ENV};
mod run;
pub use deliver::{send_bound, After, SendOptions, Sent};
pub use run::{run_bound, typed_line, RunOptions, RunResult, QUIET_READY};
mod wait;
pub use wait::{wait_bound, Condition, Waited, TEXT_WINDOW};

pub use client::{derive_status, Client, Entry, KillOutcome, NewSession, SessionStatus, Target};
pub use conn::{
    AttachEvent, AttachReader, AttachWriter, Attached, Bound, Connection, DEFAULT_TIMEOUT,
};
pub use create::{Created, READY_TIMEOUT};
pub use error::{exit, Class, ClientError, Mismatch, UnreachableCause};
pub use events::{Event, EventFollower, EventScope};
pub use forked::DaemonEntry;
pub use lifecycle::{
    GcAction, GcOptions, GcReason, GcReport, EVENTS_RETENTION, KEEP_TAG, ORPHAN_MIN_AGE,
};
pub use meta::{validate_tag, MetaPatch, Patched, TAG_KEY_MAX, TAG_VALUE_MAX};
pub use names::{validate_display_name, NameError, DISPLAY_NAME_MAX_CHARS};
pub use options::{AttachMode, PeekFormat, PeekOptions, PeekScope, RemoveMode};
pub use proto::Attachment;
pub use receipt::{Receipt, Verdict, RECEIPT_VERSION};

// The identity and wire types the API takes and returns, so a tool needs no other
// latch crate.
pub use latch_registry::{FinalScreen, Record};
pub use latch_wire::{
    ErrorCode, ExitStatus, Incarnation, LegacyPolicy, Owner, SessionId, SessionRef, StatusReply,
};
