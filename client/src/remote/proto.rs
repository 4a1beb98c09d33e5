//! The request line on `latch bridge`'s stdin and the typed answers of version 2
//! (SPEC.md §12.2): their types and the decoder the bridge runs. The request enum
//! is append-only: an operation this build does not know decodes as
//! [`Op::Unknown`] and is answered `unsupported`, never a parse failure.

use serde::{Deserialize, Serialize};

use crate::receipt::Receipt;
use crate::remote::ErrorBody;

/// A version range, as the header and request carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    pub min: u16,
    pub max: u16,
}

/// The first line on the bridge's stdin (SPEC.md §12.2).
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Request {
    pub remote: Range,
    pub latch: String,
    #[serde(flatten)]
    pub op: Op,
}

/// What the bridge is asked to do.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Op {
    /// Run latch with these arguments; its output and exit code are the answer.
    Exec {
        args: Vec<String>,
        /// The receipt (without its host) that `--receipt -` or `receipt verify -`
        /// in ARGS means: the bridge reads no receipt file (SPEC.md §12.2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        receipt: Option<Receipt>,
    },
    /// Resolve a REF, then relay bytes between stdin/stdout and its daemon.
    Connect(ConnectRequest),
    /// Version 2: signal a creation's program through its proven identity, when
    /// its daemon cannot be asked (SPEC.md §9.11), as the host's own `kill` does.
    KillByProof(KillByProof),
    /// Version 2: the derived status of exactly this creation.
    Status(Pinned),
    /// Version 2: the host's `ls --json` entries under these filters.
    Ls(LsRequest),
    /// Version 2: a conditional metadata patch (SPEC.md §9.3).
    Patch(PatchRequest),
    /// Version 2: gc on the host (SPEC.md §9.12).
    Gc(GcRequest),
    /// Version 2: `rm` of the creation a reference resolves to (SPEC.md §9.11).
    Remove(Removal),
    /// Version 2: `restart` of the creation a reference resolves to.
    Restart(Restarting),
    /// Version 2: what a receipt says now (SPEC.md §9.10).
    Verify(VerifyRequest),
    /// Version 2: a command the host runs and prints itself (its output and exit
    /// code are the caller's), given as the caller parsed it (SPEC.md §12.2).
    Command(CommandRequest),
    /// An operation this build does not know (a newer caller's): answered
    /// `unsupported`. Never sent.
    #[serde(skip)]
    Unknown(String),
}

impl Op {
    /// The operation's name on the wire.
    pub fn name(&self) -> &str {
        match self {
            Self::Exec { .. } => "exec",
            Self::Connect(_) => "connect",
            Self::KillByProof(_) => "killByProof",
            Self::Status(_) => "status",
            Self::Ls(_) => "ls",
            Self::Patch(_) => "patch",
            Self::Gc(_) => "gc",
            Self::Remove(_) => "remove",
            Self::Restart(_) => "restart",
            Self::Verify(_) => "verify",
            Self::Command(_) => "command",
            Self::Unknown(n) => n,
        }
    }
}

/// Exactly one creation, `ID@INCARNATION`, and the owner it must have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pinned {
    /// `--root` as given, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    pub session: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KillByProof {
    #[serde(flatten)]
    pub target: Pinned,
    pub signal: i32,
    /// Follow the daemon to its end, at most this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// Another stop is under way (the daemon refused BIND as draining): signal the
    /// program and follow that stop, rather than hang up the session.
    #[serde(default)]
    pub draining: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LsRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// `K=V` filters, as `ls --tag` takes them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// A reference to resolve on the host, under its preconditions (SPEC.md §9.10,
/// §9.11), as a local command resolves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resolve {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// An id, a name, or `ID@INCARNATION`.
    pub reference: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Receipt>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchRequest {
    #[serde(flatten)]
    pub target: Resolve,
    /// The patch, in `meta patch`'s JSON (SPEC.md §10).
    pub patch: serde_json::Value,
    /// The reference must be an exact id, never a name (`meta patch --id`).
    #[serde(default)]
    pub exact_id: bool,
}

/// `patch`'s answer: the keys changed and the record after.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchedAnswer {
    pub changed: Vec<String>,
    pub record: latch_registry::Record,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Removal {
    #[serde(flatten)]
    pub target: Resolve,
    #[serde(default)]
    pub force: bool,
}

/// `remove`'s answer: the creation removed and its owner.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Removed {
    pub session: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Restarting {
    #[serde(flatten)]
    pub target: Resolve,
    pub grace_ms: u64,
}

/// `restart`'s answer: the creation replaced, and the new one's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartedAnswer {
    pub previous: String,
    pub record: latch_registry::Record,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// `--json`.
    #[serde(default)]
    pub json: bool,
    /// The receipt a host receipt names, its host taken out: the command's
    /// `--receipt` (the bridge reads no receipt file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Receipt>,
    /// The command, in the CLI's schema.
    pub command: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VerifyRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// The receipt, its host taken out.
    pub receipt: Receipt,
}

/// `verify`'s answer (SPEC.md §9.10).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verified {
    pub verdict: crate::Verdict,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Receipt>,
    pub detail: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GcRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default)]
    pub abandoned_cwd: bool,
    pub grace_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// A version-2 answer: the line after the header (SPEC.md §12.2).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Answered<T> {
    Ok(T),
    Error(ErrorBody),
    /// The operation named is not one this bridge serves.
    Unsupported(String),
}

#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConnectRequest {
    /// `--root` as given, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// ID, name or ID@INCARNATION.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Create first, with these `latch new` arguments as the caller parsed them
    /// (an object whose schema is the CLI's, SPEC.md §12.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create: Option<serde_json::Value>,
    /// Record `kill_requested` with this signal, under the lock, only while the
    /// record holds the incarnation resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill: Option<i32>,
    /// The incarnation the caller expects (checked again by BIND).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<String>,
    /// Resolve under this receipt (without its host), as `--receipt` (SPEC.md §9.10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Receipt>,
}

/// The operations this build serves, by their wire names.
const KNOWN: [&str; 11] = [
    "exec",
    "connect",
    "killByProof",
    "status",
    "ls",
    "patch",
    "gc",
    "remove",
    "restart",
    "verify",
    "command",
];

/// Decodes the request line (without its newline), as the bridge does. A request
/// whose one operation is not one this build knows decodes as [`Op::Unknown`].
pub fn decode_request(line: &[u8]) -> Result<Request, serde_json::Error> {
    let err = match serde_json::from_slice::<Request>(line) {
        Ok(r) => return Ok(r),
        Err(e) => e,
    };
    #[derive(Deserialize)]
    struct Envelope {
        remote: Range,
        latch: String,
        #[serde(flatten)]
        rest: serde_json::Map<String, serde_json::Value>,
    }
    match serde_json::from_slice::<Envelope>(line) {
        Ok(env) if env.rest.len() == 1 => {
            let name = env.rest.keys().next().cloned().unwrap_or_default();
            if KNOWN.contains(&name.as_str()) {
                return Err(err);
            }
            Ok(Request {
                remote: env.remote,
                latch: env.latch,
                op: Op::Unknown(name),
            })
        }
        _ => Err(err),
    }
}
