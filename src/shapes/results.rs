//! The shapes the acting commands answer with (SPEC.md §10): output after a cursor,
//! a wait's condition, an action's outcome, a patch, a receipt's verdict, a legacy
//! directory.

use latch_wire::Owner;
use serde::Serialize;

use super::SessionJson;

/// `peek --since --json`: the output after a cursor (SPEC §10).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputJson {
    pub id: String,
    pub incarnation: String,
    pub output_range: RangeJson,
    pub dropped_bytes: u64,
    pub output: String,
}

/// `wait --json` (SPEC §10).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitedJson {
    pub id: String,
    pub incarnation: String,
    pub condition: &'static str,
    pub output_cursor: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
}

/// `outputRange`: a range of output cursors, `end` excluded.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RangeJson {
    pub start: u64,
    pub end: u64,
}

/// `kill --json` and `rm --json`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ActionJson {
    pub id: String,
    pub incarnation: String,
    #[schemars(with = "Option<String>")]
    pub owner: Option<Owner>,
    pub outcome: &'static str,
}

/// `tag`, `rename` and `meta patch`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PatchedJson {
    pub changed: Vec<String>,
    pub metadata: SessionJson,
}

/// `receipt verify --json`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct VerdictJson {
    pub verdict: &'static str,
    pub detail: String,
    pub id: Option<String>,
    pub incarnation: Option<String>,
    #[schemars(with = "Option<String>")]
    pub owner: Option<Owner>,
}

/// `legacy-dir --json`: the directory and the ids it holds entries for.
#[derive(Debug, Clone, Serialize)]
pub struct LegacyDirJson {
    pub dir: std::path::PathBuf,
    pub sessions: Vec<String>,
}
