//! The request line on `latch bridge`'s stdin (SPEC.md §12.2): its types and the
//! decoder the bridge runs on it. Here rather than in the binary so that the fuzz
//! target in `fuzz/` runs the very decoder the bridge does (not a public API).

use serde::{Deserialize, Serialize};

use crate::receipt::Receipt;

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
    /// Create first: these `latch new` arguments (run with `--json new -d`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create: Option<Vec<String>>,
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

/// Decodes the request line (without its newline), as the bridge does.
pub fn decode_request(line: &[u8]) -> Result<Request, serde_json::Error> {
    serde_json::from_slice(line)
}
