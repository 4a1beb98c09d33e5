# latch's zsh hooks (SPEC §4.6), read from .zshenv in an interactive shell. They go
# first in precmd_functions and preexec_functions, so $? is the command's.
typeset -gi __latch_ran=0 __latch_eol=0
typeset -g __latch_eol_mark=
__latch_url() {
    emulate -L zsh
    setopt extendedglob
    local LC_ALL=C
    REPLY=${1//(#m)[^a-zA-Z0-9\/._~-]/%${(l:2::0:)$(( [##16] #MATCH ))}}
}
__latch_precmd() {
    local ret=$?
    if (( __latch_ran )); then
        if (( __latch_eol )); then
            # D went out with the end-of-line mark (below); the user's mark is back.
            if [[ $__latch_eol_mark == unset ]]; then
                unset PROMPT_EOL_MARK
            else
                PROMPT_EOL_MARK=${__latch_eol_mark#set:}
            fi
            __latch_eol=0
        else
            builtin printf '\e]133;D;%s\a' $ret
        fi
        __latch_ran=0
    fi
    __latch_url "$PWD"
    builtin printf '\e]7;file://%s%s\a\e]133;A\a' "${HOST-}" "$REPLY"
    # B ends the prompt; a theme that rebuilds PROMPT later drops it (A still marks it).
    if [[ $PS1 != *$'%{\e]133;B\a%}' ]]; then
        PS1+=$'%{\e]133;B\a%}'
    fi
    # A continuation prompt (an unclosed quote) is marked A;k=s, as kitty does.
    if [[ $PS2 != $'%{\e]133;A;k=s\a%}'* ]]; then
        PS2=$'%{\e]133;A;k=s\a%}'$PS2
    fi
    return $ret
}
__latch_preexec() {
    __latch_ran=1
    # With PROMPT_SP, zsh prints its end-of-line mark and a line of blanks before
    # precmd runs: D rides at the front of that mark (`%?` is the command's status),
    # so the command's output ends where D says.
    if [[ -o promptsp && -o promptcr ]]; then
        __latch_eol_mark=${PROMPT_EOL_MARK+set:$PROMPT_EOL_MARK}
        __latch_eol_mark=${__latch_eol_mark:-unset}
        PROMPT_EOL_MARK=$'%{\e]133;D;%?\a%}'${PROMPT_EOL_MARK-%B%S%#%s%b}
        __latch_eol=1
    fi
    __latch_url "$1"
    builtin printf '\e]133;C;cmdline_url=%s\a' "$REPLY"
}
precmd_functions=(__latch_precmd ${precmd_functions[@]})
preexec_functions=(__latch_preexec ${preexec_functions[@]})
# Commands latch types begin with a space: keep them out of the history.
setopt HIST_IGNORE_SPACE
