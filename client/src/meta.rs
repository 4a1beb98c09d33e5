//! Exact-id metadata patches: compare and act under one lock (SPEC.md §11 I4).

use std::collections::BTreeMap;

use latch_registry::events::{Change, Event, EventKind};
use latch_registry::{Record, DEFAULT_LOCK_WAIT};
use latch_wire::{Incarnation, SessionId};
use serde::Serialize;
use serde_json::{json, Value};

use crate::client::Client;
use crate::error::ClientError;
use crate::names::validate_display_name;

/// Longest tag key, in bytes.
pub const TAG_KEY_MAX: usize = 128;
/// Longest tag value, in bytes.
pub const TAG_VALUE_MAX: usize = 4096;

/// A merge patch: `{"displayName"?: string|null, "tags"?: {key: string|null}}`.
/// `None` leaves a field alone; `Some(None)` deletes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaPatch {
    /// New display name, or deletion.
    pub display_name: Option<Option<String>>,
    /// Tag updates; `None` deletes the key.
    pub tags: BTreeMap<String, Option<String>>,
    /// New resume command, or deletion (SPEC.md §9.3). Only `meta patch --id`
    /// sets it: never a tag, a name or a default.
    pub resume_command: Option<Option<Vec<String>>>,
}

/// Checks a tag key and value.
pub fn validate_tag(key: &str, value: Option<&str>) -> Result<(), ClientError> {
    if key.is_empty()
        || key.len() > TAG_KEY_MAX
        || key.contains('=')
        || key.chars().any(char::is_control)
    {
        return Err(ClientError::Usage(format!(
            "tag key {key:?} must be 1 to {TAG_KEY_MAX} bytes without '=' or control characters"
        )));
    }
    if let Some(v) = value {
        if v.len() > TAG_VALUE_MAX {
            return Err(ClientError::Usage(format!(
                "tag {key:?} value is longer than {TAG_VALUE_MAX} bytes"
            )));
        }
    }
    Ok(())
}

impl MetaPatch {
    /// Parses and validates a JSON merge object. Any other key, a wrong type, or
    /// malformed JSON is a usage error.
    pub fn from_json(text: &str) -> Result<Self, ClientError> {
        let usage = |m: String| ClientError::Usage(m);
        let v: Value =
            serde_json::from_str(text).map_err(|e| usage(format!("patch is not JSON: {e}")))?;
        let Value::Object(obj) = v else {
            return Err(usage("patch must be a JSON object".into()));
        };
        let mut patch = Self::default();
        for (k, v) in obj {
            match k.as_str() {
                "displayName" => {
                    patch.display_name = Some(match v {
                        Value::Null => None,
                        Value::String(s) => {
                            validate_display_name(&s).map_err(|e| usage(e.to_string()))?;
                            Some(s)
                        }
                        _ => return Err(usage("displayName must be a string or null".into())),
                    });
                }
                "tags" => {
                    let Value::Object(tags) = v else {
                        return Err(usage("tags must be an object".into()));
                    };
                    for (tk, tv) in tags {
                        let tv = match tv {
                            Value::Null => None,
                            Value::String(s) => Some(s),
                            _ => return Err(usage(format!("tag {tk:?} must be a string or null"))),
                        };
                        validate_tag(&tk, tv.as_deref())?;
                        patch.tags.insert(tk, tv);
                    }
                }
                "resumeCommand" => patch.resume_command = Some(parse_resume(v)?),
                "owner" | "ownerMac" => {
                    return Err(usage(format!(
                        "{k:?} is set at creation and can never be changed (SPEC.md §2.4); \
                         a patch may only hold displayName, tags and resumeCommand"
                    )))
                }
                other => {
                    return Err(usage(format!(
                        "patch may only hold displayName, tags and resumeCommand, not {other:?}"
                    )))
                }
            }
        }
        Ok(patch)
    }

    /// The patch in `meta patch`'s JSON (SPEC.md §10), which [`from_json`](Self::from_json)
    /// reads back equal: how a patch travels to another host (SPEC.md §12.2).
    pub fn to_json(&self) -> Value {
        let mut out = serde_json::Map::new();
        if let Some(name) = &self.display_name {
            out.insert("displayName".into(), json!(name));
        }
        if !self.tags.is_empty() {
            out.insert("tags".into(), json!(self.tags));
        }
        if let Some(cmd) = &self.resume_command {
            out.insert("resumeCommand".into(), json!(cmd));
        }
        Value::Object(out)
    }

    /// Applies the patch to `record`; returns the changes as key -> {old, new}.
    pub fn apply(&self, record: &mut Record) -> BTreeMap<String, Change> {
        let mut changes = BTreeMap::new();
        if let Some(name) = &self.display_name {
            if &record.display_name != name {
                changes.insert(
                    "displayName".into(),
                    Change {
                        old: json!(record.display_name),
                        new: json!(name),
                    },
                );
                record.display_name.clone_from(name);
            }
        }
        if let Some(cmd) = &self.resume_command {
            if &record.resume_command != cmd {
                changes.insert(
                    "resumeCommand".into(),
                    Change {
                        old: json!(record.resume_command),
                        new: json!(cmd),
                    },
                );
                record.resume_command.clone_from(cmd);
            }
        }
        for (k, v) in &self.tags {
            let old = record.tags.get(k).cloned();
            if &old != v {
                changes.insert(
                    format!("tags.{k}"),
                    Change {
                        old: json!(old),
                        new: json!(v),
                    },
                );
                match v {
                    Some(v) => record.tags.insert(k.clone(), v.clone()),
                    None => record.tags.remove(k),
                };
            }
        }
        changes
    }
}

/// `resumeCommand` of a patch: null, or a non-empty array of strings without NUL
/// (an argument `exec` can pass).
fn parse_resume(v: Value) -> Result<Option<Vec<String>>, ClientError> {
    let bad = || {
        ClientError::Usage(
            "resumeCommand must be null or a non-empty array of strings without NUL".into(),
        )
    };
    match v {
        Value::Null => Ok(None),
        Value::Array(items) if !items.is_empty() => items
            .into_iter()
            .map(|i| match i {
                Value::String(s) if !s.contains('\0') => Ok(s),
                _ => Err(bad()),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        _ => Err(bad()),
    }
}

/// The result of a patch.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Patched {
    /// The keys that changed (`displayName`, `tags.K`); empty for a no-op.
    pub changed: Vec<String>,
    /// The record after the patch.
    #[serde(skip)]
    pub record: Record,
}

impl Client {
    /// Applies `patch` to session `id` under its lock, only if the record still holds
    /// `expect` (when given) and its proven owner is the client's required owner
    /// (when set, [`Client::with_owner`]). A no-op writes nothing and emits no event.
    pub fn patch(
        &self,
        id: &SessionId,
        expect: Option<&Incarnation>,
        patch: &MetaPatch,
    ) -> Result<Patched, ClientError> {
        let reg = self.registry();
        let lock = reg.lock(id, DEFAULT_LOCK_WAIT)?;
        let mut record = self
            .read_checked(id)?
            .ok_or_else(|| ClientError::NotFound(id.to_string()))?;
        if let Some(want) = expect {
            if !want.ct_eq(&record.incarnation) {
                return Err(ClientError::replaced(id, *want, Some(record.incarnation)));
            }
        }
        // The owner precondition, in the same critical section (SPEC.md §9.11).
        self.check_owner(&record)?;
        let changes = patch.apply(&mut record);
        if !changes.is_empty() {
            reg.write_record(&lock, &record)?;
            // The record is written first, then the event, both under the lock: a
            // crash between the two leaves a change without its event, never an
            // event without its change (SPEC.md §9.9). An events file that is not
            // a regular file loses the event, never the change.
            reg.append_event_or_lose(
                &lock,
                &Event::new(
                    id,
                    &record.incarnation,
                    EventKind::MetadataChange {
                        changes: changes.clone(),
                    },
                ),
            )?;
        }
        Ok(Patched {
            changed: changes.keys().cloned().collect(),
            record,
        })
    }
}
