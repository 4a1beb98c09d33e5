//! Finding and checking the registry root (SPEC.md §9.1).

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::RegistryError;

/// Resolves the root: `explicit` (the `--root` flag), else `$LATCH_ROOT`, else
/// `$XDG_STATE_HOME/latch`, else `$HOME/.local/state/latch`. Empty values are
/// treated as unset.
pub fn resolve_root(explicit: Option<&Path>) -> Result<PathBuf, RegistryError> {
    resolve_root_from(
        explicit,
        std::env::var_os("LATCH_ROOT"),
        std::env::var_os("XDG_STATE_HOME"),
        std::env::var_os("HOME"),
    )
}

/// [`resolve_root`] with the environment passed in (for tests).
pub fn resolve_root_from(
    explicit: Option<&Path>,
    latch_root: Option<OsString>,
    xdg_state: Option<OsString>,
    home: Option<OsString>,
) -> Result<PathBuf, RegistryError> {
    let nonempty = |v: Option<OsString>| v.filter(|s| !s.is_empty()).map(PathBuf::from);
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = nonempty(latch_root) {
        return Ok(p);
    }
    if let Some(p) = nonempty(xdg_state) {
        return Ok(p.join("latch"));
    }
    nonempty(home)
        .map(|h| h.join(".local/state/latch"))
        .ok_or(RegistryError::NoRoot)
}

/// Creates the root with mode 0700 if it does not exist (parents with the default
/// mode), then checks it: a real directory (not a symlink), owned by the effective
/// user, mode exactly 0700.
pub fn ensure_root(root: &Path) -> Result<(), RegistryError> {
    match fs::symlink_metadata(root) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = root.parent() {
                if !parent.as_os_str().is_empty() {
                    fs::create_dir_all(parent).map_err(|e| {
                        RegistryError::io(format!("create {}", parent.display()), e)
                    })?;
                }
            }
            match fs::DirBuilder::new().mode(0o700).create(root) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(RegistryError::io(format!("create {}", root.display()), e)),
            }
        }
        Err(e) => return Err(RegistryError::io(format!("stat {}", root.display()), e)),
    }
    check_root(root)
}

/// Checks an existing root without creating anything.
pub fn check_root(root: &Path) -> Result<(), RegistryError> {
    let unsafe_root = |reason: String| RegistryError::UnsafeRoot {
        path: root.to_path_buf(),
        reason,
    };
    let meta = fs::symlink_metadata(root)
        .map_err(|e| RegistryError::io(format!("stat {}", root.display()), e))?;
    if meta.file_type().is_symlink() {
        return Err(unsafe_root("it is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(unsafe_root("it is not a directory".into()));
    }
    owned_by_us_with_mode(&meta, 0o700, root).map_err(unsafe_root)
}

/// Whether a registry file (or the root) is ours with exactly `mode`; otherwise
/// what is wrong and how to fix it (SPEC.md §9.1, §9.2).
pub(crate) fn owned_by_us_with_mode(
    meta: &fs::Metadata,
    mode: u32,
    path: &Path,
) -> Result<(), String> {
    let euid = nix::unistd::geteuid().as_raw();
    if meta.uid() != euid {
        return Err(format!(
            "owned by uid {}, not by you (uid {euid})",
            meta.uid()
        ));
    }
    let actual = meta.permissions().mode() & 0o7777;
    if actual != mode {
        return Err(format!(
            "mode is {actual:04o}, must be {mode:04o} (fix with: chmod {mode:o} {})",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_order() {
        let s = |v: &str| Some(OsString::from(v));
        assert_eq!(
            resolve_root_from(Some(Path::new("/x")), s("/l"), s("/s"), s("/h")).unwrap(),
            PathBuf::from("/x")
        );
        assert_eq!(
            resolve_root_from(None, s("/l"), s("/s"), s("/h")).unwrap(),
            PathBuf::from("/l")
        );
        assert_eq!(
            resolve_root_from(None, s(""), s("/s"), s("/h")).unwrap(),
            PathBuf::from("/s/latch")
        );
        assert_eq!(
            resolve_root_from(None, None, None, s("/h")).unwrap(),
            PathBuf::from("/h/.local/state/latch")
        );
        assert!(matches!(
            resolve_root_from(None, None, None, None),
            Err(RegistryError::NoRoot)
        ));
    }

    #[test]
    fn creates_0700_and_refuses_wrong_modes_and_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("a/b/latch");
        ensure_root(&root).unwrap();
        let mode = fs::metadata(&root).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);

        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        let err = ensure_root(&root).unwrap_err().to_string();
        assert!(err.contains("0755"), "{err}");

        fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        let err = ensure_root(&link).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");

        let file = tmp.path().join("file");
        fs::write(&file, b"").unwrap();
        assert!(ensure_root(&file).is_err());
    }

    #[test]
    fn refuses_a_root_owned_by_someone_else() {
        if !nix::unistd::geteuid().is_root() {
            return; // chown needs root; CI runs as root.
        }
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("theirs");
        ensure_root(&root).unwrap();
        nix::unistd::chown(&root, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let err = ensure_root(&root).unwrap_err().to_string();
        assert!(err.contains("owned by uid 65534"), "{err}");
    }
}
