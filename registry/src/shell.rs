//! Shell integration (SPEC §4.6): how an interactive bash, zsh or fish is started so
//! that it marks its prompts and commands with OSC 133 and reports its working
//! directory with OSC 7, without a file of the user's being written or changed.
//!
//! The scripts are part of latch (`registry/shell/`) and are put in the registry
//! root's `shell/` directory when a session needs them; the session's program is
//! then started with arguments or an environment naming them. The record keeps the
//! user's command as given: only the spawned argv differs.
//!
//! Integration applies only to a shell given no arguments at all (`bash`, or
//! `$SHELL` as `latch new` resolves it): any flag of the user's (`--norc`,
//! `--rcfile`, `-c`, `-l`, a script) means the user chose how the shell starts, and
//! it is started exactly so.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::record::create_temp;

/// The environment variable that tells an integration script to act (and that the
/// script removes from the shell's environment).
pub const ENV_INTEGRATION: &str = "LATCH_SHELL_INTEGRATION";

/// The scripts, as `shell/<path>` in the root.
const SCRIPTS: &[(&str, &str)] = &[
    ("latch.bash", include_str!("../shell/latch.bash")),
    ("zsh/.zshenv", include_str!("../shell/zsh/.zshenv")),
    ("zsh/latch.zsh", include_str!("../shell/zsh/latch.zsh")),
    ("latch.fish", include_str!("../shell/latch.fish")),
];

/// Whether a creation's shell is started with integration (`latch new
/// --no-shell-integration`, `"shellIntegration": false` in defaults.json: off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Integration {
    /// A lone bash, zsh or fish is started with latch's scripts.
    #[default]
    On,
    /// Every program is started exactly as given.
    Off,
}

/// A shell latch integrates with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    /// GNU bash.
    Bash,
    /// zsh.
    Zsh,
    /// fish.
    Fish,
}

impl Shell {
    /// The shell `command` starts when integration applies: one argument, the
    /// shell's path or name, and nothing else.
    pub fn of(command: &[String]) -> Option<Shell> {
        let [program] = command else { return None };
        let name = Path::new(program).file_name()?.to_str()?;
        match name {
            "bash" => Some(Shell::Bash),
            "zsh" => Some(Shell::Zsh),
            "fish" => Some(Shell::Fish),
            _ => None,
        }
    }
}

/// How to start a shell with integration: its argv and what to add to or remove
/// from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The argv to spawn.
    pub command: Vec<String>,
    /// Variables to set.
    pub set: Vec<(OsString, OsString)>,
    /// Variables to remove.
    pub unset: Vec<OsString>,
}

/// The scripts' directory in `root`.
pub fn scripts_dir(root: &Path) -> PathBuf {
    root.join("shell")
}

/// How `command` is started with integration, when it is a shell latch knows
/// (`None` otherwise), given the program's environment lookups in `env`. The
/// scripts must be in place ([`install`]).
pub fn launch(
    root: &Path,
    command: &[String],
    env: impl Fn(&str) -> Option<OsString>,
) -> Option<Launch> {
    let shell = Shell::of(command)?;
    let dir = scripts_dir(root);
    let program = command[0].clone();
    let on = (OsString::from(ENV_INTEGRATION), OsString::from("1"));
    Some(match shell {
        Shell::Bash => Launch {
            command: vec![
                program,
                "--rcfile".into(),
                dir.join("latch.bash").to_string_lossy().into_owned(),
            ],
            set: vec![on],
            unset: Vec::new(),
        },
        Shell::Zsh => {
            // The user's ZDOTDIR goes to the shim as it was: set (even empty) or
            // unset, which zsh tells apart.
            let mut set = vec![on, ("ZDOTDIR".into(), dir.join("zsh").into_os_string())];
            match env("ZDOTDIR") {
                Some(v) => {
                    set.push(("LATCH_ZDOTDIR_SET".into(), "1".into()));
                    set.push(("LATCH_ZDOTDIR".into(), v));
                }
                None => set.push(("LATCH_ZDOTDIR_SET".into(), "0".into())),
            }
            Launch {
                command: vec![program],
                set,
                unset: vec!["LATCH_ZDOTDIR".into()],
            }
        }
        Shell::Fish => Launch {
            command: vec![
                program,
                "--init-command".into(),
                "source \"$LATCH_FISH_INTEGRATION\"; set -e LATCH_FISH_INTEGRATION".into(),
            ],
            set: vec![
                on,
                (
                    "LATCH_FISH_INTEGRATION".into(),
                    dir.join("latch.fish").into_os_string(),
                ),
            ],
            unset: Vec::new(),
        },
    })
}

/// Puts the scripts in `root/shell/` (mode 0700, files 0600), each written to a
/// temp file and renamed into place, so a shell starting meanwhile reads a whole
/// script, and nothing planted there is followed. They are regenerated at every
/// creation that needs them, and are not fsync'd: they are latch's own text.
pub fn install(root: &Path) -> io::Result<()> {
    let dir = scripts_dir(root);
    for sub in [dir.clone(), dir.join("zsh")] {
        match fs::DirBuilder::new().mode(0o700).create(&sub) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let meta = fs::symlink_metadata(&sub)?;
        if !meta.is_dir() {
            return Err(io::Error::other(format!(
                "{} is not a directory",
                sub.display()
            )));
        }
    }
    for (name, text) in SCRIPTS {
        let path = dir.join(name);
        let (mut f, tmp) = create_temp(&path)?;
        let written = f
            .write_all(text.as_bytes())
            .and_then(|()| fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn only_a_lone_known_shell_is_integrated() {
        assert_eq!(Shell::of(&cmd(&["bash"])), Some(Shell::Bash));
        assert_eq!(Shell::of(&cmd(&["/usr/bin/zsh"])), Some(Shell::Zsh));
        assert_eq!(Shell::of(&cmd(&["/usr/local/bin/fish"])), Some(Shell::Fish));
        for no in [
            &["sh"][..],
            &["dash"],
            &["bash", "--norc"],
            &["bash", "-l"],
            &["bash", "--rcfile", "x"],
            &["bash", "-c", "true"],
            &["zsh", "script.zsh"],
            &["fish", "-c", "echo"],
            &["vim"],
            &[],
        ] {
            assert_eq!(Shell::of(&cmd(no)), None, "{no:?}");
        }
    }

    #[test]
    fn zsh_gets_the_users_zdotdir_as_it_was() {
        let root = Path::new("/r");
        let unset = launch(root, &cmd(&["zsh"]), |_| None).unwrap();
        assert!(unset
            .set
            .contains(&("LATCH_ZDOTDIR_SET".into(), "0".into())));
        let empty = launch(root, &cmd(&["zsh"]), |k| {
            (k == "ZDOTDIR").then(OsString::new)
        })
        .unwrap();
        assert!(empty
            .set
            .contains(&("LATCH_ZDOTDIR_SET".into(), "1".into())));
        assert!(empty.set.contains(&("LATCH_ZDOTDIR".into(), "".into())));
        assert!(empty
            .set
            .contains(&("ZDOTDIR".into(), "/r/shell/zsh".into())));
    }

    #[test]
    fn install_writes_every_script_and_replaces_what_was_planted() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fs::create_dir(root.join("shell")).unwrap();
        // A symlink planted where a script goes is replaced, never followed.
        let victim = root.join("victim");
        fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, root.join("shell/latch.bash")).unwrap();
        install(root).unwrap();
        install(root).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        for (name, text) in SCRIPTS {
            let path = root.join("shell").join(name);
            assert!(!fs::symlink_metadata(&path)
                .unwrap()
                .file_type()
                .is_symlink());
            assert_eq!(fs::read_to_string(path).unwrap(), *text);
        }
    }
}
