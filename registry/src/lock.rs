//! The per-session lock: `flock(LOCK_EX)` on an open fd of `<root>/<id>.lock`
//! (SPEC.md §9.4). The file holds nothing; no pid is ever written.
//!
//! A lock file may be unlinked by its holder (when a session is removed). A waiter
//! that then acquires the lock on the unlinked inode would hold nothing, so after
//! `flock` succeeds the fd's inode is compared with the path's; on a mismatch the
//! fd is dropped and the acquisition starts over.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use latch_wire::SessionId;

use crate::error::RegistryError;

/// Default time to wait for a busy lock before answering busy.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(2);

/// A held session lock. Dropping it releases the lock.
#[derive(Debug)]
pub struct SessionLock {
    // Held only to keep the flock; read by tests.
    #[allow(dead_code)]
    file: File,
    path: PathBuf,
    id: SessionId,
}

impl SessionLock {
    /// Acquires the lock at `path` for `id`, waiting at most `wait`.
    pub fn acquire(path: &Path, id: &SessionId, wait: Duration) -> Result<Self, RegistryError> {
        let deadline = Instant::now() + wait;
        let mut backoff = Duration::from_micros(200);
        loop {
            let file = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
                .map_err(|e| RegistryError::io(format!("open {}", path.display()), e))?;
            let locked =
                rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive);
            if let Err(errno) = locked {
                if errno != rustix::io::Errno::WOULDBLOCK {
                    return Err(RegistryError::io(
                        format!("flock {}", path.display()),
                        errno.into(),
                    ));
                }
            } else {
                if same_inode(&file, path)? {
                    return Ok(Self {
                        file,
                        path: path.to_path_buf(),
                        id: id.clone(),
                    });
                }
                // The holder unlinked it; retry on the current file.
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(RegistryError::Busy { id: id.to_string() });
            }
            // Waiting for another process to release a lock: there is no event to
            // wait on for flock with a deadline, so poll with a capped backoff.
            std::thread::sleep(backoff.min(deadline - now));
            backoff = (backoff * 2).min(Duration::from_millis(20));
        }
    }

    /// The session this lock is for.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// Unlinks the lock file while holding it (when the session is removed).
    pub fn unlink(&self) -> io::Result<()> {
        match fs::remove_file(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

fn same_inode(file: &File, path: &Path) -> Result<bool, RegistryError> {
    let held = file
        .metadata()
        .map_err(|e| RegistryError::io(format!("stat {}", path.display()), e))?;
    match fs::symlink_metadata(path) {
        Ok(now) => Ok(now.dev() == held.dev() && now.ino() == held.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(RegistryError::io(format!("stat {}", path.display()), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_gets_busy_then_succeeds_after_release() {
        let tmp = tempfile::tempdir().unwrap();
        let id = SessionId::new("s").unwrap();
        let path = tmp.path().join("s.lock");
        let held = SessionLock::acquire(&path, &id, Duration::ZERO).unwrap();
        // flock locks are per open file description: a second open in this process
        // conflicts just as another process would.
        let busy = SessionLock::acquire(&path, &id, Duration::from_millis(30));
        assert!(matches!(busy, Err(RegistryError::Busy { .. })));
        drop(held);
        SessionLock::acquire(&path, &id, Duration::ZERO).unwrap();
    }

    #[test]
    fn unlinked_lock_is_not_granted_twice() {
        let tmp = tempfile::tempdir().unwrap();
        let id = SessionId::new("s").unwrap();
        let path = tmp.path().join("s.lock");
        let first = SessionLock::acquire(&path, &id, Duration::ZERO).unwrap();
        let stale = File::open(&path).unwrap();
        first.unlink().unwrap();
        drop(first);
        // Someone who opened the old inode and now flocks it must not be told it
        // holds the lock: same_inode rejects it.
        rustix::fs::flock(&stale, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
        assert!(!same_inode(&stale, &path).unwrap());
        // A fresh acquisition creates a new file and holds it, concurrently with the
        // stale flock on the dead inode.
        let fresh = SessionLock::acquire(&path, &id, Duration::ZERO).unwrap();
        assert!(same_inode(&fresh.file, &path).unwrap());
    }
}
