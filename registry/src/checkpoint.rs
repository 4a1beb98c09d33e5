//! `<id>.checkpoint`: the screen a running session showed when its output last
//! went quiet, kept against a reboot (SPEC.md §9.1, §9.18). `<id>.screen` keeps
//! meaning the final screen.

use std::io;

use latch_wire::{Incarnation, SessionId};
use serde::{Deserialize, Serialize};

use crate::lock::SessionLock;
use crate::record::write_atomic;
use crate::{Registry, RegistryError};

/// The most read from a checkpoint file; a larger one is degraded (SPEC §9.14).
pub const CHECKPOINT_MAX_BYTES: u64 = 1 << 20;
/// The most each capture in a checkpoint keeps (its newest whole lines).
pub const CHECKPOINT_SCREEN_MAX_BYTES: usize = 256 << 10;
/// The checkpoint format version.
pub const CHECKPOINT_VERSION: u32 = 1;

/// `<id>.checkpoint`: JSON, rewritten whole by the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Checkpoint {
    /// 1.
    pub version: u32,
    /// The session id.
    pub id: SessionId,
    /// The creation whose screen this is.
    pub incarnation: Incarnation,
    /// The terminal size then.
    pub rows: u16,
    /// The terminal size then.
    pub cols: u16,
    /// When it was taken, ms since the epoch.
    pub saved_at_ms: u64,
    /// The output cursor it reflects (§4.7).
    pub output_cursor: u64,
    /// The visible screen, line-based with SGR (`peek --ansi`).
    pub ansi: String,
    /// The visible screen as plain text (`peek --plain`).
    pub plain: String,
}

impl Registry {
    /// `<root>/<id>.checkpoint`.
    pub fn checkpoint_path(&self, id: &SessionId) -> std::path::PathBuf {
        self.root().join(format!("{id}.checkpoint"))
    }

    /// Writes a checkpoint under the session lock (atomically, §9.1), only while
    /// the record holds its incarnation and no exit: `Ok(false)` otherwise.
    pub fn write_checkpoint(
        &self,
        lock: &SessionLock,
        cp: &Checkpoint,
    ) -> Result<bool, RegistryError> {
        if lock.id() != &cp.id {
            return Err(RegistryError::io(
                "write checkpoint",
                io::Error::other("lock and checkpoint name different ids"),
            ));
        }
        match self.read_record(&cp.id)? {
            Some(r) if r.incarnation.ct_eq(&cp.incarnation) && r.exit.is_none() => {}
            _ => return Ok(false),
        }
        let bytes = serde_json::to_vec(cp)
            .map_err(|e| RegistryError::io("encode checkpoint", io::Error::other(e)))?;
        if bytes.len() as u64 > CHECKPOINT_MAX_BYTES {
            return Err(RegistryError::io(
                "write checkpoint",
                io::Error::other("the checkpoint would be over CHECKPOINT_MAX_BYTES"),
            ));
        }
        write_atomic(&self.checkpoint_path(&cp.id), &bytes).map(|()| true)
    }

    /// The checkpoint of `id`'s creation `inc`, if one was kept. A file of another
    /// creation counts as none; one that cannot be read is `Corrupt` (degraded).
    /// Read only through the one reader (§9.1), at most CHECKPOINT_MAX_BYTES.
    pub fn read_checkpoint(
        &self,
        id: &SessionId,
        inc: &Incarnation,
    ) -> Result<Option<Checkpoint>, RegistryError> {
        let path = self.checkpoint_path(id);
        let corrupt = |reason: String| RegistryError::Corrupt {
            path: path.clone(),
            reason,
        };
        let Some(bytes) = crate::file::read_bounded(&path, crate::file::FileKind::Checkpoint)?
        else {
            return Ok(None);
        };
        let cp: Checkpoint = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if &cp.id != id || cp.version != CHECKPOINT_VERSION {
            return Err(corrupt("another id or version".into()));
        }
        Ok(cp.incarnation.ct_eq(inc).then_some(cp))
    }
}

#[cfg(test)]
mod tests {
    const SPEC: &str = include_str!("../../SPEC.md");

    #[test]
    fn checkpoint_constants_match_spec() {
        assert!(SPEC.contains(&format!(
            "| CHECKPOINT_MAX_BYTES | {} |",
            super::CHECKPOINT_MAX_BYTES
        )));
        assert!(SPEC.contains(&format!(
            "| CHECKPOINT_SCREEN_MAX_BYTES | {} |",
            super::CHECKPOINT_SCREEN_MAX_BYTES
        )));
        assert!(SPEC.contains("| `<id>.checkpoint` |"));
        assert!(SPEC.contains(
            "{\"version\": 1, \"id\", \"incarnation\", \"rows\", \"cols\", \"savedAtMs\""
        ));
        assert_eq!(super::CHECKPOINT_VERSION, 1);
    }
}
