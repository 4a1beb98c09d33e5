//! The `--json` shapes of SPEC.md §10, one type each: the schema is these types,
//! and a test pins SPEC.md §10's field lists to them. The sessions' shapes are in
//! `session`, the acting commands' answers in `results`, the errors here.

use latch_client::ClientError;
use serde::Serialize;

mod results;
mod session;

pub(crate) use results::{
    ActionJson, LegacyDirJson, OutputJson, PatchedJson, RangeJson, VerdictJson, WaitedJson,
};
pub(crate) use session::{
    CreatedJson, DaemonJson, EntryJson, ForegroundJson, RestartedJson, SessionJson, ShellJson,
    StatusJson,
};

/// The error object printed with `--json`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    pub kind: &'static str,
    pub message: String,
    pub exit_code: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidates: Option<Vec<String>>,
}

/// A host `ls --host` could not list (SPEC.md §12.6).
#[derive(Debug, Clone, Serialize)]
pub struct HostDownJson {
    pub host: String,
    pub status: &'static str,
    pub error: String,
}

/// An error body as read back from another host's latch (`--host`, SPEC.md §12).
pub use latch_client::remote::ErrorBody as ErrorBodyOwned;

/// `{"error": ...}`.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorJson {
    pub error: ErrorBody,
}

impl From<&ClientError> for ErrorJson {
    fn from(e: &ClientError) -> Self {
        Self {
            error: ErrorBody {
                kind: e.kind(),
                message: e.to_string(),
                exit_code: e.exit_code(),
                candidates: match e {
                    ClientError::Ambiguous { ids, .. } => {
                        Some(ids.iter().map(ToString::to_string).collect())
                    }
                    _ => None,
                },
            },
        }
    }
}

/// Prints one shape as a JSON line on stdout.
pub fn print<T: Serialize>(value: &T) -> Result<(), ClientError> {
    let line = serde_json::to_string(value).map_err(|e| ClientError::failed("", e))?;
    println!("{line}");
    Ok(())
}

#[cfg(test)]
mod tests;
