//! The final screen: what a session's terminal showed when its program exited,
//! kept beside the record under the same incarnation and removed with it
//! (SPEC §9.15).

use std::io;

use latch_wire::{Incarnation, SessionId};
use serde::{Deserialize, Serialize};

use crate::lock::SessionLock;
use crate::record::{write_atomic, ExitRecord};
use crate::{Registry, RegistryError};

/// The most a final-screen file may hold; a larger one is unreadable (degraded).
pub const FINAL_SCREEN_MAX_BYTES: u64 = 4 << 20;
/// The most each of the two scrollback captures keeps (their newest whole lines).
pub const FINAL_FULL_MAX_BYTES: usize = 1 << 20;

/// `<id>.screen`: JSON, written once by the daemon when its program exits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FinalScreen {
    /// 1.
    pub version: u32,
    /// The session id.
    pub id: SessionId,
    /// The creation whose screen this is.
    pub incarnation: Incarnation,
    /// The terminal size at the exit.
    pub rows: u16,
    /// The terminal size at the exit.
    pub cols: u16,
    /// How the program ended.
    pub exit: ExitRecord,
    /// The visible screen as plain text (`peek --plain`).
    pub plain: String,
    /// The visible screen, line-based with SGR (`peek --ansi`).
    pub ansi: String,
    /// The kept scrollback and the screen as plain text (`peek --full`).
    pub full_plain: String,
    /// The same, line-based with SGR (`peek --full --ansi`).
    pub full_ansi: String,
}

/// The final-screen format version.
pub const FINAL_SCREEN_VERSION: u32 = 1;

impl Registry {
    /// `<root>/<id>.screen`.
    pub fn final_screen_path(&self, id: &SessionId) -> std::path::PathBuf {
        self.root().join(format!("{id}.screen"))
    }

    /// Writes the final screen under the session lock (atomically, §9.1).
    pub fn write_final_screen(
        &self,
        lock: &SessionLock,
        screen: &FinalScreen,
    ) -> Result<(), RegistryError> {
        if lock.id() != &screen.id {
            return Err(RegistryError::io(
                "write final screen",
                io::Error::other("lock and screen name different ids"),
            ));
        }
        let bytes = serde_json::to_vec(screen)
            .map_err(|e| RegistryError::io("encode final screen", io::Error::other(e)))?;
        write_atomic(&self.final_screen_path(&screen.id), &bytes)
    }

    /// The final screen of `id`'s creation `inc`, if one was kept. A file of
    /// another creation counts as none; one that cannot be read is `Corrupt`.
    pub fn read_final_screen(
        &self,
        id: &SessionId,
        inc: &Incarnation,
    ) -> Result<Option<FinalScreen>, RegistryError> {
        let path = self.final_screen_path(id);
        let corrupt = |reason: String| RegistryError::Corrupt {
            path: path.clone(),
            reason,
        };
        // Bounded, no-follow, regular files only (SPEC §9.14).
        let Some(bytes) = crate::file::read_bounded(&path, crate::file::FileKind::FinalScreen)?
        else {
            return Ok(None);
        };
        let screen: FinalScreen =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if &screen.id != id || screen.version != FINAL_SCREEN_VERSION {
            return Err(corrupt("another id or version".into()));
        }
        Ok(screen.incarnation.ct_eq(inc).then_some(screen))
    }
}
