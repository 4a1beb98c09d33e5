//! `latch`: parse, dispatch, map errors to exit codes.

// Every `println!`, `eprintln!` and `eprint!` in this crate goes through `output`,
// whose writes never panic: a closed or full stdout ends latch with 141 or 13
// after the effect is done, and its output is reported on stderr (SPEC §10).
// Defined before the modules, these shadow std's macros in all of them.
macro_rules! println {
    () => {
        $crate::output::out_line("")
    };
    ($($arg:tt)*) => {
        $crate::output::out_fmt(format_args!($($arg)*))
    };
}

macro_rules! eprintln {
    () => {
        $crate::output::err_fmt(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::output::err_fmt(format_args!($($arg)*), true)
    };
}

macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::output::err_fmt(format_args!($($arg)*), false)
    };
}

mod attach;
mod attach_fd;
mod bridge;
mod cli;
mod commands;
mod complete;
mod control;
mod events;
mod keys;
mod legacy_dir;
mod mcp;
mod output;
mod pictures;
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
    std::process::exit(output::finish(code));
}
