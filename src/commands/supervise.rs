//! `new --restart/--with-parent/--rm` (SPEC.md §9.16), and `latch up` / `latch down`.

use latch_client::{Client, ClientError, NewSession};
use latch_registry::supervision::{RestartMode, RestartPolicy};

use super::usage;
use crate::cli::Dur;

/// `latch new`'s supervision options.
#[derive(Debug, Clone, Default, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct SuperviseArgs {
    /// Restart the program when it ends: no, on-failure (a non-zero exit, or a
    /// signal other than latch's kill), always (any end but a kill).
    #[arg(long, value_name = "POLICY", value_enum)]
    pub restart: Option<RestartArg>,
    /// Restarts allowed inside the window before the session is flapping (default 5).
    #[arg(long, value_name = "N", requires = "restart")]
    pub max_restarts: Option<u32>,
    /// The window restarts are counted in (default 60s).
    #[arg(long, value_name = "DUR", requires = "restart")]
    pub restart_window: Option<Dur>,
    /// The first delay before a restart, doubling up to 30 s (default 250ms).
    #[arg(long, value_name = "DUR", requires = "restart")]
    pub restart_delay: Option<Dur>,
    /// Hang the session up when this process (PID) or session creation (REF) ends.
    #[arg(long, value_name = "PID|REF")]
    pub with_parent: Option<String>,
    /// Remove the session's files once its exit has been delivered.
    #[arg(long = "rm", conflicts_with = "restart")]
    pub rm: bool,
}

/// `--restart`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum RestartArg {
    /// Never.
    No,
    /// After a failure.
    OnFailure,
    /// After every end but a kill.
    Always,
}

impl SuperviseArgs {
    /// The restart policy asked for (`no` is none).
    pub fn policy(&self) -> Option<RestartPolicy> {
        let mode = match self.restart? {
            RestartArg::No => return None,
            RestartArg::OnFailure => RestartMode::OnFailure,
            RestartArg::Always => RestartMode::Always,
        };
        let ms = |d: Dur| u64::try_from(d.0.as_millis()).unwrap_or(u64::MAX);
        let mut p = RestartPolicy::new(mode);
        if let Some(n) = self.max_restarts {
            p.max_restarts = n;
        }
        if let Some(w) = self.restart_window {
            p.window_ms = ms(w);
        }
        if let Some(d) = self.restart_delay {
            p.delay_ms = ms(d);
        }
        Some(p)
    }
}

/// Whether `--with-parent` names a process rather than a session.
fn parent_pid(given: &str) -> Option<Result<u32, ClientError>> {
    given.bytes().all(|b| b.is_ascii_digit()).then(|| {
        given
            .parse::<u32>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| usage(format!("--with-parent {given:?}: not a pid")))
    })
}

/// Puts the supervision options into `new`; the parent is proven now (SPEC §9.16).
pub(crate) fn apply(
    args: &SuperviseArgs,
    client: &Client,
    new: &mut NewSession,
) -> Result<(), ClientError> {
    new.restart = args.policy();
    new.ephemeral = args.rm;
    if let Some(given) = &args.with_parent {
        new.parent = Some(match parent_pid(given) {
            Some(pid) => client.parent_process(pid?)?,
            None => client.parent_session(&client.resolve(given, None)?)?,
        });
    }
    Ok(())
}

/// `new --with-parent PID` with `--host`: a pid of this host means nothing on
/// another one, so it is refused (exit 2, SPEC §9.16).
pub(crate) fn check_remote(args: &SuperviseArgs) -> Result<(), ClientError> {
    match args.with_parent.as_deref().and_then(parent_pid) {
        Some(_) => Err(usage(
            "--with-parent PID names a process of this host; with --host, name a session (ID@INCARNATION)",
        )),
        None => Ok(()),
    }
}
