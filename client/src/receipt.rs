//! Receipts: durable evidence of one creation (SPEC.md §11 I8, SPEC.md §9.10).

use std::path::{Path, PathBuf};

use latch_registry::file::{read_bounded, FileKind};
use latch_registry::record::write_atomic;
use latch_registry::RegistryError;
use latch_wire::{Incarnation, Owner, SessionId, SessionRef};
use serde::{Deserialize, Serialize};

use crate::client::{derive_status, Client, SessionStatus};
use crate::create::Created;
use crate::error::{ClientError, UnreachableCause};

/// Receipt format version.
pub const RECEIPT_VERSION: u32 = 1;

/// The receipt file's contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct Receipt {
    /// Format version.
    pub version: u32,
    /// The host whose registry holds the session, as `--host` named it (SPEC.md
    /// §12); absent for a session of this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The registry root the session was created in.
    pub root: PathBuf,
    /// The id.
    pub id: SessionId,
    /// The creation.
    pub incarnation: Incarnation,
    /// Creation time, ms since the epoch.
    pub created_at: u64,
    /// The creation's owner (SPEC.md §2.4), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// The owner MAC (as in the record), so the owner can be verified under the
    /// key after the session is gone. Every receipt this build accepts has it
    /// (SPEC.md §9.10); it is optional here only to report its absence as foreign.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_mac: Option<String>,
}

impl Receipt {
    /// The session reference the receipt names.
    pub fn session(&self) -> SessionRef {
        SessionRef::new(self.id.clone(), self.incarnation)
    }

    /// Reads and parses a receipt file.
    pub fn load(path: &Path) -> Result<Self, ClientError> {
        // Bounded, no-follow, regular files only (SPEC §9.10, §9.14).
        let unreadable = |reason: String| {
            ClientError::unreachable(
                UnreachableCause::Degraded,
                format!("receipt {} is unreadable: {reason}", path.display()),
            )
        };
        let bytes = match read_bounded(path, FileKind::Receipt) {
            Ok(Some(b)) => b,
            Ok(None) => return Err(unreadable("no such file".into())),
            Err(e) => return Err(unreadable(e.reason())),
        };
        Self::from_bytes(&bytes, path)
    }

    /// Parses a receipt file's contents; `path` names it in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self, ClientError> {
        let r: Receipt = serde_json::from_slice(bytes).map_err(|e| {
            ClientError::unreachable(
                UnreachableCause::Degraded,
                format!("receipt {} is unreadable: {e}", path.display()),
            )
        })?;
        if r.version != RECEIPT_VERSION {
            return Err(ClientError::unreachable(
                UnreachableCause::Degraded,
                format!(
                    "receipt {} has unknown version {}",
                    path.display(),
                    r.version
                ),
            ));
        }
        Ok(r)
    }

    /// Writes the receipt atomically with mode 0600 (SPEC.md §9.10).
    pub fn write(&self, path: &Path) -> Result<(), ClientError> {
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| ClientError::failed("", e))?;
        write_atomic(path, &bytes).map_err(ClientError::from)
    }
}

/// What a receipt says about its session now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Live, same incarnation.
    Current,
    /// Same incarnation, program ended (or its daemon vanished).
    Exited,
    /// The id now holds another incarnation.
    Replaced,
    /// No record for the id.
    Removed,
    /// Not minted under this registry's key (or for another registry root).
    Foreign,
    /// The receipt or the record cannot be read.
    Unreadable,
}

impl Verdict {
    /// The exit code `latch receipt verify` uses.
    pub fn exit_code(self) -> i32 {
        match self {
            Self::Current => 0,
            Self::Exited => 1,
            Self::Removed => 3,
            Self::Replaced => 4,
            Self::Unreadable => 7,
            Self::Foreign => 9,
        }
    }

    /// The verdict's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Current => "current",
            Self::Exited => "exited",
            Self::Replaced => "replaced",
            Self::Removed => "removed",
            Self::Foreign => "foreign",
            Self::Unreadable => "unreadable",
        }
    }
}

fn same_root(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

impl Client {
    /// Writes a receipt for `created` atomically with mode 0600.
    pub fn write_receipt(&self, path: &Path, created: &Created) -> Result<Receipt, ClientError> {
        let receipt = self.receipt_for(created);
        receipt.write(path)?;
        Ok(receipt)
    }

    /// The receipt of a creation in this registry (no host: it is this host's).
    pub fn receipt_for(&self, created: &Created) -> Receipt {
        let root = self
            .registry()
            .root()
            .canonicalize()
            .unwrap_or_else(|_| self.registry().root().to_path_buf());
        Receipt {
            version: RECEIPT_VERSION,
            host: None,
            root,
            id: created.id.clone(),
            incarnation: created.incarnation,
            created_at: created.created_at_ms,
            owner: created.owner.clone(),
            owner_mac: Some(self.registry().owner_mac(
                &created.id,
                &created.incarnation,
                created.owner.as_ref(),
            )),
        }
    }

    /// Loads a receipt that must belong to this registry (root and key).
    pub fn load_receipt(&self, path: &Path) -> Result<Receipt, ClientError> {
        self.check_receipt(Receipt::load(path)?, &path.display().to_string())
    }

    /// Checks a receipt (read from `what`) belongs to this registry: no host, this
    /// root, minted and owned under this key.
    pub fn check_receipt(&self, r: Receipt, what: &str) -> Result<Receipt, ClientError> {
        if r.host.is_some()
            || !same_root(&r.root, self.registry().root())
            || !self.registry().verify(&r.id, &r.incarnation)
            || !self.receipt_owner_verifies(&r)
        {
            return Err(ClientError::Refused(format!(
                "receipt {what} was not issued by this registry ({}{})",
                self.registry().root().display(),
                r.host
                    .as_deref()
                    .map(|h| format!("; it names host {h}"))
                    .unwrap_or_default()
            )));
        }
        Ok(r)
    }

    /// Whether the receipt's owner (or its absence) is the one bound to its creation
    /// (SPEC.md §2.4). Every receipt carries `ownerMac`: one without it does not
    /// verify, so stripping both fields never turns a receipt into one claiming no
    /// owner (SPEC.md §9.10).
    fn receipt_owner_verifies(&self, r: &Receipt) -> bool {
        r.owner_mac.as_deref().is_some_and(|mac| {
            latch_registry::record::from_hex(mac).is_some_and(|mac| {
                self.registry()
                    .key()
                    .verify_owner(&r.id, &r.incarnation, r.owner.as_ref(), &mac)
            })
        })
    }

    /// What a receipt says now.
    pub fn verify_receipt(&self, path: &Path) -> (Verdict, Option<Receipt>, String) {
        match Receipt::load(path) {
            Ok(r) => self.verify_receipt_value(r),
            Err(e) => (Verdict::Unreadable, None, e.to_string()),
        }
    }

    /// What a receipt already read says now (SPEC.md §9.10).
    pub fn verify_receipt_value(&self, r: Receipt) -> (Verdict, Option<Receipt>, String) {
        if let Some(h) = &r.host {
            let msg = format!("issued for host {h} (verify it there: latch --host {h})");
            return (Verdict::Foreign, Some(r), msg);
        }
        if !same_root(&r.root, self.registry().root()) {
            let msg = format!("issued for registry {}", r.root.display());
            return (Verdict::Foreign, Some(r), msg);
        }
        if !self.registry().verify(&r.id, &r.incarnation) {
            return (
                Verdict::Foreign,
                Some(r),
                "not minted under this registry's key".into(),
            );
        }
        if !self.receipt_owner_verifies(&r) {
            return (
                Verdict::Foreign,
                Some(r),
                "its owner does not verify under this registry's key (edited?)".into(),
            );
        }
        match self.registry().read_record(&r.id) {
            Ok(None) => (Verdict::Removed, Some(r), "no session with this id".into()),
            Err(e @ RegistryError::Corrupt { .. }) => (Verdict::Unreadable, Some(r), e.to_string()),
            Err(e) => (Verdict::Unreadable, Some(r), e.to_string()),
            Ok(Some(rec)) if !rec.incarnation.ct_eq(&r.incarnation) => {
                let msg = format!("the id now holds incarnation {}", rec.incarnation);
                (Verdict::Replaced, Some(r), msg)
            }
            Ok(Some(rec)) => match derive_status(&rec) {
                SessionStatus::Running => (Verdict::Current, Some(r), "running".into()),
                st @ SessionStatus::Exited { .. } => (Verdict::Exited, Some(r), st.to_string()),
                SessionStatus::Vanished => (Verdict::Exited, Some(r), "its daemon vanished".into()),
                SessionStatus::Unknown { reason } => (Verdict::Unreadable, Some(r), reason),
            },
        }
    }
}
