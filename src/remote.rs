//! `--host`: the library's remote transport (SPEC.md §12), with the ssh options the
//! CLI takes from its environment.

pub use latch_client::remote::*;

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// `$LATCH_SSH` (the ssh program), `$LATCH_SSH_CONFIG` (its `-F`) and
/// `$LATCH_REMOTE_BIN` (the latch to run there), each unset or empty for the
/// default (SPEC.md §12.2).
pub fn ssh_options() -> SshOptions {
    let mut o = SshOptions::default();
    if let Some(p) = env_nonempty("LATCH_SSH") {
        o.program = p;
    }
    o.config = env_nonempty("LATCH_SSH_CONFIG").map(Into::into);
    if let Some(b) = env_nonempty("LATCH_REMOTE_BIN") {
        o.remote_bin = b;
    }
    o
}

/// `host` with the ssh this CLI reaches it by.
pub fn remote(host: &Host) -> Remote {
    Remote {
        host: host.clone(),
        ssh: ssh_options(),
    }
}
