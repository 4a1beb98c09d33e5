//! `Lazy<T>`: a subcommand's arguments, built only when that subcommand is the one
//! invoked.
//!
//! clap's derive builds every subcommand's arguments before it parses: with about
//! forty subcommands that is most of a short command's start-up (the command tree
//! was about 0.6 ms of CPU and 96 page faults of `latch --version`, BENCHMARKS.md).
//! `Command::defer` postpones a command's own arguments until clap builds it, which
//! it does for the subcommand it selected, and for every one only when help,
//! completion or the manual page walks the whole tree (`Command::build`).

use clap::{ArgMatches, Args, Command, FromArgMatches};

/// `T`'s arguments, added to its subcommand when clap builds that subcommand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lazy<T>(pub T);

impl<T: Args> Args for Lazy<T> {
    fn augment_args(cmd: Command) -> Command {
        cmd.defer(keep_help::<T, false>)
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        cmd.defer(keep_help::<T, true>)
    }

    fn group_id() -> Option<clap::Id> {
        T::group_id()
    }
}

/// Adds `T`'s arguments, keeping the help the subcommand's variant gave it: built
/// eagerly, the variant's `about` came after `T`'s and won; deferred, `T`'s doc
/// comment (or a flattened type's) would come last.
fn keep_help<T: Args, const UPDATE: bool>(cmd: Command) -> Command {
    let about = cmd.get_about().cloned();
    let long = cmd.get_long_about().cloned();
    let cmd = if UPDATE {
        T::augment_args_for_update(cmd)
    } else {
        T::augment_args(cmd)
    };
    let cmd = match about {
        Some(about) => cmd.about(about),
        None => cmd,
    };
    match long {
        Some(long) => cmd.long_about(long),
        None => cmd.long_about(None),
    }
}

impl<T: FromArgMatches> FromArgMatches for Lazy<T> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches(matches).map(Lazy)
    }

    fn from_arg_matches_mut(matches: &mut ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches_mut(matches).map(Lazy)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches(matches)
    }

    fn update_from_arg_matches_mut(&mut self, matches: &mut ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches_mut(matches)
    }
}
