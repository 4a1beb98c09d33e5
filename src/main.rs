//! `latch`: parse, dispatch, map errors to exit codes.

mod attach;
mod cli;
mod commands;
mod events;
mod keys;
mod legacy_dir;
mod output;
mod shapes;

use clap::Parser;

fn main() {
    let cli = cli::Cli::parse();
    let json = cli.wants_json();
    let code = match commands::run(cli) {
        Ok(code) => code,
        Err(e) => output::report_error(&e, json),
    };
    std::process::exit(code);
}
