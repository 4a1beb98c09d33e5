// Included (hidden) by latch-client's doctests; not part of the library. The
// doctests start real daemons, so they need the `latch` binary: `$LATCH_BIN`, or
// the one `cargo test --workspace` built in the target directory.

/// The `latch` binary that starts daemons.
#[allow(dead_code)]
pub fn latch_program() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("LATCH_BIN") {
        return p.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    // Under the build target's directory (.cargo/config.toml names one), else
    // directly under the target directory.
    let named = target
        .join("x86_64-unknown-linux-gnu")
        .join(profile)
        .join("latch");
    let p = if named.is_file() {
        named
    } else {
        target.join(profile).join("latch")
    };
    assert!(
        p.is_file(),
        "latch-client's doctests start real daemons with the latch binary, and {} is \
         missing: run them with `cargo test --workspace`, or set LATCH_BIN",
        p.display()
    );
    p
}

/// A scratch registry root (0700, under /tmp so socket paths stay short). Every
/// session still running in it is killed, through its proven identity, on drop.
#[allow(dead_code)]
pub struct Scratch {
    dir: tempfile::TempDir,
}

#[allow(dead_code)]
impl Scratch {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ltdoc")
            .tempdir_in("/tmp")
            .expect("a scratch registry root");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod 700 the scratch root");
        Self { dir }
    }

    pub fn root(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let Ok(client) = latch_client::Client::open(self.root(), latch_program()) else {
            return;
        };
        for entry in client.list().unwrap_or_default() {
            if let latch_client::Entry::Session { record, .. } = entry {
                let s = latch_wire::SessionRef::new(record.id.clone(), record.incarnation);
                let _ = client.kill(&s, 9, Some(std::time::Duration::from_secs(5)));
            }
        }
    }
}

/// A scratch registry and a client on it.
#[allow(dead_code)]
pub fn scratch_client() -> (Scratch, latch_client::Client) {
    let scratch = Scratch::new();
    let client = latch_client::Client::open(scratch.root(), latch_program())
        .expect("open the scratch registry");
    (scratch, client)
}
