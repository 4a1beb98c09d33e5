//! `latch`: parse, dispatch, map errors to exit codes.

mod attach;
mod bridge;
mod cli;
mod commands;
mod complete;
mod events;
mod keys;
mod legacy_dir;
mod output;
mod remote;
mod shapes;

use clap::Parser;

fn main() {
    // `LATCH_COMPLETE=SHELL latch -- ARGS…`: a completion request from the script
    // `latch completions SHELL` prints; answered before anything else runs.
    complete::answer_requests();
    let cli = cli::Cli::parse();
    let json = cli.wants_json();
    let code = match commands::run(cli) {
        Ok(code) => code,
        Err(e) => output::report_error(&e, json),
    };
    std::process::exit(code);
}
