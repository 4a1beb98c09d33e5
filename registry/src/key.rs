//! The registry key and incarnation minting (SPEC.md §2.2, §9.2).
//!
//! ```text
//! tag = HMAC-SHA256(key, "latch/incarnation/v1" || 0x00 || u8(len(id)) || id || nonce)[..16]
//! incarnation = "v1." || hex(nonce) || "." || hex(tag)
//! ```
//!
//! The nonce is 16 fresh random bytes per creation, so two creations of one id
//! never share an incarnation; anyone holding the key can verify one later.

use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;

use latch_wire::ids::{INCARNATION_NONCE_LEN, INCARNATION_TAG_LEN};
use latch_wire::{Incarnation, Owner, SessionId};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use crate::error::RegistryError;
use crate::record::{create_temp, parent_dir};

/// Why [`Key::load`] found no key to use.
enum LoadError {
    /// No file at the path.
    Missing,
    /// A file that must not be used, or cannot be read.
    Refused(RegistryError),
}

/// Domain separation tag for incarnation MACs.
pub const INCARNATION_DOMAIN: &[u8] = b"latch/incarnation/v1";
/// Domain separation tag for owner MACs (SPEC.md §2.4).
pub const OWNER_DOMAIN: &[u8] = b"latch/owner/v1";
/// Length of an owner MAC (the whole HMAC-SHA256 tag), in bytes.
pub const OWNER_MAC_LEN: usize = 32;
/// Key length in bytes.
pub const KEY_LEN: usize = 32;

/// The registry's secret key.
pub struct Key {
    hmac: hmac::Key,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// A key from raw bytes.
    pub fn from_bytes(bytes: &[u8; KEY_LEN]) -> Self {
        Self {
            hmac: hmac::Key::new(hmac::HMAC_SHA256, bytes),
        }
    }

    /// Loads the key at `path`, creating it if it does not exist. Refuses a key not
    /// owned by the effective user, with any mode other than 0600, a symlink, or of
    /// the wrong length (an empty one included: never silently replaced).
    ///
    /// Creation never exposes a partial key (SPEC.md §9.2): 32 random bytes go to a
    /// fresh temp file (random name, `O_EXCL`, 0600), are fsync'd, and the file is
    /// hard-linked to `path`, which fails if `path` exists; then the directory is
    /// fsync'd. When another process links first, its key is loaded instead. A crash
    /// leaves at most a stray temp file, which nothing reads.
    pub fn load_or_create(path: &Path) -> Result<Self, RegistryError> {
        // Twice at most: a key that vanishes between a lost race and the read is an
        // error, not a loop.
        for _ in 0..2 {
            match Self::load(path) {
                Err(LoadError::Missing) => {}
                Err(LoadError::Refused(e)) => return Err(e),
                Ok(key) => return Ok(key),
            }
            if let Some(key) = Self::create(path)? {
                return Ok(key);
            }
        }
        Err(RegistryError::io(
            format!("load {}", path.display()),
            io::Error::new(io::ErrorKind::NotFound, "the key vanished while being read"),
        ))
    }

    /// Creates the key; `Ok(None)` when another process created it first.
    fn create(path: &Path) -> Result<Option<Self>, RegistryError> {
        let mut fresh = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut fresh)
            .map_err(|_| RegistryError::UnsafeKey {
                path: path.to_path_buf(),
                reason: "no system randomness".into(),
            })?;
        let io_err = |what: &str, e| RegistryError::io(format!("{what} {}", path.display()), e);
        let (mut f, tmp) = create_temp(path).map_err(|e| io_err("create", e))?;
        let linked = f
            .write_all(&fresh)
            .and_then(|()| f.sync_all())
            .and_then(|()| fs::hard_link(&tmp, path));
        // The temp name has served its purpose either way.
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                fs::File::open(parent_dir(path))
                    .and_then(|d| d.sync_all())
                    .map_err(|e| io_err("sync the directory of", e))?;
                Ok(Some(Self::from_bytes(&fresh)))
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(io_err("create", e)),
        }
    }

    fn load(path: &Path) -> Result<Self, LoadError> {
        let unsafe_key = |reason: String| {
            LoadError::Refused(RegistryError::UnsafeKey {
                path: path.to_path_buf(),
                reason,
            })
        };
        // No-follow, non-blocking, regular files only (SPEC §9.2, §9.14).
        let f = match crate::file::open_regular(path) {
            Ok(Some(f)) => f,
            Ok(None) => return Err(LoadError::Missing),
            Err(crate::file::FileError::Io { source, .. }) => {
                return Err(LoadError::Refused(RegistryError::io(
                    format!("open {}", path.display()),
                    source,
                )))
            }
            Err(e) => return Err(unsafe_key(e.reason())),
        };
        let refused_io = |what: &str, e| {
            LoadError::Refused(RegistryError::io(format!("{what} {}", path.display()), e))
        };
        let meta = f.metadata().map_err(|e| refused_io("stat", e))?;
        crate::root::owned_by_us_with_mode(&meta, 0o600, path).map_err(unsafe_key)?;
        let mut bytes = Vec::with_capacity(KEY_LEN + 1);
        Read::by_ref(&mut &f)
            .take(crate::file::FileKind::Key.max_bytes() + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| refused_io("read", e))?;
        if bytes.is_empty() {
            // Older builds created the file first and wrote it second; a crash in
            // between left it empty. Whatever was minted under it is unverifiable.
            return Err(unsafe_key(format!(
                "it is empty, expected {KEY_LEN} bytes (an older latch interrupted while \
                 creating it leaves it so); if no session was created under this root, \
                 remove it (rm {}) and latch creates a new one",
                path.display()
            )));
        }
        let arr: [u8; KEY_LEN] = bytes.as_slice().try_into().map_err(|_| {
            unsafe_key(format!(
                "it holds {} bytes, expected {KEY_LEN}",
                bytes.len()
            ))
        })?;
        Ok(Self::from_bytes(&arr))
    }

    fn tag(&self, id: &SessionId, nonce: &[u8; INCARNATION_NONCE_LEN]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.hmac);
        ctx.update(INCARNATION_DOMAIN);
        ctx.update(&[0]);
        // Ids are at most 64 bytes, so the length fits a byte; the prefix keeps
        // (id, nonce) boundaries unambiguous.
        let len = u8::try_from(id.as_str().len()).unwrap_or(u8::MAX);
        ctx.update(&[len]);
        ctx.update(id.as_str().as_bytes());
        ctx.update(nonce);
        ctx.sign()
    }

    /// Mints a fresh incarnation for `id`.
    pub fn mint(&self, id: &SessionId) -> Result<Incarnation, RegistryError> {
        let mut nonce = [0u8; INCARNATION_NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| RegistryError::NoRandomness)?;
        let full = self.tag(id, &nonce);
        let mut tag = [0u8; INCARNATION_TAG_LEN];
        tag.copy_from_slice(&full.as_ref()[..INCARNATION_TAG_LEN]);
        Ok(Incarnation::from_parts(nonce, tag))
    }

    /// The owner MAC's message (SPEC.md §2.4): the domain, the id, the incarnation's
    /// 32 bytes, then whether there is an owner and which. Every part is
    /// length-prefixed or of fixed length, so no two inputs share a message.
    fn owner_message(id: &SessionId, inc: &Incarnation, owner: Option<&Owner>) -> Vec<u8> {
        let mut msg = Vec::with_capacity(OWNER_DOMAIN.len() + 100 + 512);
        msg.extend_from_slice(OWNER_DOMAIN);
        msg.push(0);
        msg.push(u8::try_from(id.as_str().len()).unwrap_or(u8::MAX));
        msg.extend_from_slice(id.as_str().as_bytes());
        msg.extend_from_slice(inc.nonce());
        msg.extend_from_slice(inc.tag());
        match owner {
            None => msg.push(0),
            Some(o) => {
                msg.push(1);
                // At most 128 scalar values, so at most 512 bytes: fits a u16.
                let len = u16::try_from(o.as_str().len()).unwrap_or(u16::MAX);
                msg.extend_from_slice(&len.to_be_bytes());
                msg.extend_from_slice(o.as_str().as_bytes());
            }
        }
        msg
    }

    /// The MAC binding `owner` (or its absence) to the creation `{id, inc}`.
    pub fn owner_mac(
        &self,
        id: &SessionId,
        inc: &Incarnation,
        owner: Option<&Owner>,
    ) -> [u8; OWNER_MAC_LEN] {
        let tag = hmac::sign(&self.hmac, &Self::owner_message(id, inc, owner));
        let mut out = [0u8; OWNER_MAC_LEN];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Whether `mac` binds `owner` (or its absence) to `{id, inc}` under this key;
    /// ring's `hmac::verify` compares in constant time.
    pub fn verify_owner(
        &self,
        id: &SessionId,
        inc: &Incarnation,
        owner: Option<&Owner>,
        mac: &[u8],
    ) -> bool {
        hmac::verify(&self.hmac, &Self::owner_message(id, inc, owner), mac).is_ok()
    }

    /// Whether `inc` was minted for `id` under this key (constant-time comparison).
    pub fn verify(&self, id: &SessionId, inc: &Incarnation) -> bool {
        let full = self.tag(id, inc.nonce());
        let mut tag = [0u8; INCARNATION_TAG_LEN];
        tag.copy_from_slice(&full.as_ref()[..INCARNATION_TAG_LEN]);
        Incarnation::from_parts(*inc.nonce(), tag).ct_eq(inc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn mint_is_fresh_and_verifiable_only_under_its_key_and_id() {
        let key = Key::from_bytes(&[1; KEY_LEN]);
        let other = Key::from_bytes(&[2; KEY_LEN]);
        let id = SessionId::new("build").unwrap();
        let a = key.mint(&id).unwrap();
        let b = key.mint(&id).unwrap();
        assert_ne!(a, b, "two creations of one id share an incarnation");
        assert!(key.verify(&id, &a));
        assert!(key.verify(&id, &b));
        assert!(!other.verify(&id, &a));
        assert!(!key.verify(&SessionId::new("build2").unwrap(), &a));
        let mut forged_tag = *a.tag();
        forged_tag[0] ^= 1;
        assert!(!key.verify(&id, &Incarnation::from_parts(*a.nonce(), forged_tag)));
    }

    #[test]
    fn known_answer() {
        // Pins the MAC construction of SPEC.md §2.2.
        let key = Key::from_bytes(&[0x0b; KEY_LEN]);
        let id = SessionId::new("s").unwrap();
        let nonce = [0u8; 16];
        let mut msg = Vec::new();
        msg.extend_from_slice(b"latch/incarnation/v1\0\x01s");
        msg.extend_from_slice(&nonce);
        let expect = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &[0x0b; 32]), &msg);
        assert_eq!(key.tag(&id, &nonce).as_ref(), expect.as_ref());
    }

    #[test]
    fn owner_mac_binds_owner_id_and_incarnation() {
        let key = Key::from_bytes(&[1; KEY_LEN]);
        let id = SessionId::new("build").unwrap();
        let inc = key.mint(&id).unwrap();
        let a = Owner::new("A").unwrap();
        let b = Owner::new("B").unwrap();
        let mac = key.owner_mac(&id, &inc, Some(&a));
        assert!(key.verify_owner(&id, &inc, Some(&a), &mac));
        assert!(
            !key.verify_owner(&id, &inc, Some(&b), &mac),
            "owner swapped"
        );
        assert!(!key.verify_owner(&id, &inc, None, &mac), "owner stripped");
        let inc2 = key.mint(&id).unwrap();
        assert!(
            !key.verify_owner(&id, &inc2, Some(&a), &mac),
            "other creation"
        );
        let id2 = SessionId::new("build2").unwrap();
        assert!(!key.verify_owner(&id2, &inc, Some(&a), &mac), "other id");
        let other = Key::from_bytes(&[2; KEY_LEN]);
        assert!(!other.verify_owner(&id, &inc, Some(&a), &mac), "other key");
        assert!(
            !key.verify_owner(&id, &inc, Some(&a), &mac[..16]),
            "truncated"
        );
        let none = key.owner_mac(&id, &inc, None);
        assert!(key.verify_owner(&id, &inc, None, &none));
        assert!(!key.verify_owner(&id, &inc, Some(&a), &none), "owner added");
    }

    #[test]
    fn owner_mac_known_answer() {
        // Pins the MAC construction of SPEC.md §2.4.
        let key = Key::from_bytes(&[0x0b; KEY_LEN]);
        let id = SessionId::new("s").unwrap();
        let inc = Incarnation::from_parts([0; 16], [0xff; 16]);
        let mut msg = Vec::new();
        msg.extend_from_slice(b"latch/owner/v1\0\x01s");
        msg.extend_from_slice(&[0; 16]);
        msg.extend_from_slice(&[0xff; 16]);
        msg.extend_from_slice(b"\x01\x00\x02ab");
        let expect = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &[0x0b; 32]), &msg);
        let owner = Owner::new("ab").unwrap();
        assert_eq!(
            key.owner_mac(&id, &inc, Some(&owner)).as_slice(),
            expect.as_ref()
        );
        let mut msg_none = msg[..msg.len() - 5].to_vec();
        msg_none.push(0);
        let expect = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &[0x0b; 32]), &msg_none);
        assert_eq!(key.owner_mac(&id, &inc, None).as_slice(), expect.as_ref());
    }

    #[test]
    fn key_file_is_created_0600_and_reloaded() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("registry.key");
        let k1 = Key::load_or_create(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        assert_eq!(fs::metadata(&path).unwrap().len(), KEY_LEN as u64);
        let id = SessionId::new("x").unwrap();
        let inc = k1.mint(&id).unwrap();
        let k2 = Key::load_or_create(&path).unwrap();
        assert!(k2.verify(&id, &inc));
    }

    #[test]
    fn concurrent_first_loads_agree_on_one_whole_key() {
        for _ in 0..50 {
            let tmp = tempfile::tempdir().unwrap();
            let path = tmp.path().join("registry.key");
            let barrier = std::sync::Barrier::new(8);
            let minted: Vec<Incarnation> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..8)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            let key = Key::load_or_create(&path).unwrap();
                            key.mint(&SessionId::new("x").unwrap()).unwrap()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let key = Key::load_or_create(&path).unwrap();
            let id = SessionId::new("x").unwrap();
            assert!(minted.iter().all(|inc| key.verify(&id, inc)), "two keys");
            // Only the key: every temp file is gone.
            assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 1);
        }
    }

    #[test]
    fn an_empty_key_is_refused_and_a_stray_temp_file_is_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("registry.key");
        fs::write(tmp.path().join("registry.key.tmp.0123456789abcdef"), b"12").unwrap();
        Key::load_or_create(&path).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), KEY_LEN as u64);

        let empty = tmp.path().join("empty.key");
        fs::write(&empty, b"").unwrap();
        fs::set_permissions(&empty, fs::Permissions::from_mode(0o600)).unwrap();
        let err = Key::load_or_create(&empty).unwrap_err().to_string();
        assert!(err.contains("it is empty"), "{err}");
        assert_eq!(fs::metadata(&empty).unwrap().len(), 0, "never replaced");
    }

    #[test]
    fn refuses_wrong_mode_length_and_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("registry.key");
        Key::load_or_create(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = Key::load_or_create(&path).unwrap_err().to_string();
        assert!(err.contains("0644"), "{err}");

        let short = tmp.path().join("short.key");
        fs::write(&short, b"abc").unwrap();
        fs::set_permissions(&short, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Key::load_or_create(&short)
            .unwrap_err()
            .to_string()
            .contains("3 bytes"));

        let link = tmp.path().join("link.key");
        std::os::unix::fs::symlink(&short, &link).unwrap();
        assert!(Key::load_or_create(&link)
            .unwrap_err()
            .to_string()
            .contains("symbolic link"));
    }
}
