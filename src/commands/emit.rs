//! `latch emit REF user.NAME [--data JSON]`: a user event (SPEC.md §9.9).

use clap::Args;
use latch_client::{exit, ClientError};
use latch_registry::user_events;
use latch_registry::DEFAULT_LOCK_WAIT;

use super::{usage, At};
use crate::cli::TargetArgs;

/// `latch emit`.
#[derive(Debug, Args, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EmitArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// The event's type: user.NAME (NAME: 1 to 64 letters, digits, '_', '-', '.').
    #[arg(value_name = "user.NAME")]
    pub kind: String,
    /// The event's `data`: one JSON value of at most 8192 bytes.
    #[arg(long, value_name = "JSON")]
    pub data: Option<String>,
}

/// Appends the event under the session lock, only while the record holds the
/// creation resolved (and, with `--owner`, its proven owner is OWNER).
pub(crate) fn emit(at: &At, args: &EmitArgs, json: bool) -> Result<i32, ClientError> {
    user_events::validate_type(&args.kind).map_err(|e| usage(e.to_string()))?;
    let data = args
        .data
        .as_deref()
        .map(user_events::parse_data)
        .transpose()
        .map_err(|e| usage(e.to_string()))?;
    let client = at.here()?;
    let target = at.resolve(&args.target)?;
    let reg = client.registry();
    let lock = reg.lock(&target.session.id, DEFAULT_LOCK_WAIT)?;
    // Compare and act in one critical section (SPEC §9.11).
    client.read_expecting(&target.session)?;
    let ev = reg.append_user_event(
        &lock,
        &target.session.incarnation,
        &args.kind,
        data.as_ref(),
    )?;
    drop(lock);
    if json {
        crate::shapes::print(&ev)?;
    } else {
        println!("{}: {}", target.session, args.kind);
    }
    Ok(exit::OK)
}
