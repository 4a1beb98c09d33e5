# latch's shell integration for zsh (SPEC §4.6). latch starts a zsh that was given
# no arguments with ZDOTDIR naming this directory, in the registry root, and the
# user's own ZDOTDIR (set, empty or unset) in LATCH_ZDOTDIR_SET and LATCH_ZDOTDIR.
# This file puts it back at once, reads the user's .zshenv as zsh would have, and,
# in an interactive shell, adds the hooks; zsh then reads the user's .zprofile,
# .zshrc and .zlogin from the user's ZDOTDIR. No file of the user's is changed.
__latch_dir=${ZDOTDIR-}
if [[ ${LATCH_ZDOTDIR_SET-} == 1 ]]; then
    ZDOTDIR=${LATCH_ZDOTDIR-}
else
    unset ZDOTDIR
fi
unset LATCH_ZDOTDIR LATCH_ZDOTDIR_SET
if [[ -n ${ZDOTDIR+x} ]]; then
    [[ -r $ZDOTDIR/.zshenv ]] && builtin source -- "$ZDOTDIR/.zshenv"
else
    [[ -r $HOME/.zshenv ]] && builtin source -- "$HOME/.zshenv"
fi
if [[ -o interactive && -n ${LATCH_SHELL_INTEGRATION-} && -r $__latch_dir/latch.zsh ]]; then
    builtin source -- "$__latch_dir/latch.zsh"
fi
unset LATCH_SHELL_INTEGRATION __latch_dir
