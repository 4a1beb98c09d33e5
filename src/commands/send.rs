//! `send` with delivery options (SPEC §4.7): `--paste`, `--submit`,
//! `--when-ready`, `--wait-idle`/`--wait-text`, `--file -`, `--json`.

use crate::commands::At;
use std::io::Read;
use std::path::PathBuf;

use clap::Args;
use latch_client::{exit, After, Bound, ClientError, SendOptions, Sent};
use serde::Serialize;

use crate::cli::{Dur, TargetArgs};
use crate::commands::usage;
use crate::shapes::{self, RangeJson};

/// The most text `--file -` reads (it is sent whole, in INPUT frames).
const FILE_MAX: u64 = 16 << 20;

/// `send`'s delivery options. With none of them, `send` writes its text as is.
#[derive(Debug, Args, Clone)]
pub struct DeliverArgs {
    /// Inside bracketed paste when the program enabled it (mode 2004), else as is.
    #[arg(long)]
    pub paste: bool,
    /// Enter (CR) after the text.
    #[arg(long)]
    pub submit: bool,
    /// First wait until the program is ready: the shell's prompt (integration),
    /// else its foreground process reading the terminal, or output then quiet.
    #[arg(long)]
    pub when_ready: bool,
    /// Then wait until the program has written nothing for DUR.
    #[arg(long, value_name = "DUR", conflicts_with = "wait_text")]
    pub wait_idle: Option<Dur>,
    /// Then wait for TEXT in the output after the send (with integration, after
    /// the started command's C, so the echo never matches).
    #[arg(long, value_name = "TEXT")]
    pub wait_text: Option<String>,
    /// Read the text from FILE (`-`: standard input) instead of the arguments.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// The deadline of the whole send (default 10 s).
    #[arg(long = "timeout", value_name = "DUR", default_value = "10")]
    pub timeout: Dur,
}

impl DeliverArgs {
    /// Whether any option asks for a delivered send.
    pub fn any(&self) -> bool {
        self.paste
            || self.submit
            || self.when_ready
            || self.wait_idle.is_some()
            || self.wait_text.is_some()
            || self.file.is_some()
    }

    fn options(&self) -> SendOptions {
        let after = match (&self.wait_idle, &self.wait_text) {
            (Some(d), _) => After::Idle(d.0),
            (None, Some(t)) => After::Text(t.clone()),
            (None, None) => After::Nothing,
        };
        SendOptions {
            paste: self.paste,
            submit: self.submit,
            when_ready: self.when_ready,
            after,
            timeout: self.timeout.0,
        }
    }

    /// The text: the file's (`-`: stdin), else the arguments'.
    pub fn text(&self, args: Vec<u8>) -> Result<Vec<u8>, ClientError> {
        let Some(path) = &self.file else {
            return Ok(args);
        };
        let mut out = Vec::new();
        let read = if path.as_os_str() == "-" {
            std::io::stdin().take(FILE_MAX).read_to_end(&mut out)
        } else {
            std::fs::File::open(path).and_then(|f| f.take(FILE_MAX).read_to_end(&mut out))
        };
        read.map_err(|e| usage(format!("--file {}: {e}", path.display())))?;
        Ok(out)
    }
}

/// `send --json` with delivery options (SPEC §10).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SentJson {
    pub id: String,
    pub incarnation: String,
    pub bytes: usize,
    pub pasted: bool,
    pub output_range: RangeJson,
}

/// A delivered `send`: one connection types, a second watches.
pub(crate) fn send(
    at: &At,
    target: &TargetArgs,
    text: Vec<u8>,
    deliver: &DeliverArgs,
    json: bool,
) -> Result<i32, ClientError> {
    let found = at.resolve(target)?;
    let bound = at.loc().connect(&found)?;
    let watch = at.loc().connect(&found)?;
    send_over(bound, watch, text, deliver, json)
}

/// A delivered `send` through a bound connection, wherever it lives.
pub(crate) fn send_over(
    bound: Bound,
    watch: Bound,
    text: Vec<u8>,
    deliver: &DeliverArgs,
    json: bool,
) -> Result<i32, ClientError> {
    let session = bound.target().clone();
    let text = deliver.text(text)?;
    let sent: Sent = latch_client::send_bound(bound, watch, &text, &deliver.options())?;
    if json {
        shapes::print(&SentJson {
            id: session.id.to_string(),
            incarnation: session.incarnation.to_string(),
            bytes: text.len(),
            pasted: sent.pasted,
            output_range: RangeJson {
                start: sent.start,
                end: sent.end,
            },
        })?;
    } else if deliver.wait_idle.is_some() || deliver.wait_text.is_some() {
        println!("{}", sent.end);
    }
    Ok(exit::OK)
}
