# latch's shell integration for bash (SPEC §4.6): OSC 133 marks around each prompt
# and command, and OSC 7 with the working directory. latch starts an interactive bash
# that was given no arguments with `--rcfile` naming this file, in the registry
# root; no file of the user's is written or changed.
if [[ -n "${LATCH_SHELL_INTEGRATION-}" ]]; then
    builtin unset LATCH_SHELL_INTEGRATION
    # What bash reads without --rcfile. bash reads /etc/bash.bashrc itself where it
    # was built to (Debian, Ubuntu), even with --rcfile, so it is not read again here.
    if [[ -r ~/.bashrc ]]; then
        builtin source ~/.bashrc
    fi
    # Commands latch types begin with a space: keep them out of the history.
    if [[ ":${HISTCONTROL-}:" != *:ignorespace:* && ":${HISTCONTROL-}:" != *:ignoreboth:* ]]; then
        HISTCONTROL="ignorespace${HISTCONTROL:+:$HISTCONTROL}"
    fi
    __latch_ran=0
    __latch_cwd_url() {
        builtin local LC_ALL=C s="$1" out="" c="" i=0
        for ((i = 0; i < ${#s}; i++)); do
            c=${s:i:1}
            case $c in
                [a-zA-Z0-9/._~-]) out+=$c ;;
                *) builtin printf -v c '%%%02X' "'$c"; out+=${c: -3} ;;
            esac
        done
        REPLY=$out
    }
    # First in PROMPT_COMMAND, so $? is the command's: D with its code (only after a
    # command ran: an empty line runs none), OSC 7, then A. B ends the prompt in PS1;
    # a prompt generator that rebuilds PS1 after this hook (starship, powerline)
    # drops it, and the prompt is then marked by A alone.
    __latch_precmd() {
        builtin local status="$?"
        if [[ $__latch_ran == 1 ]]; then
            builtin printf '\e]133;D;%s\a' "$status"
            __latch_ran=0
        fi
        __latch_cwd_url "$PWD"
        builtin printf '\e]7;file://%s%s\a\e]133;A\a' "${HOSTNAME-}" "$REPLY"
        if [[ $PS1 != *'\[\e]133;B\a\]' ]]; then
            PS1+='\[\e]133;B\a\]'
        fi
        # A continuation prompt (an unclosed quote) is marked A;k=s, as kitty does.
        if [[ $PS2 != '\[\e]133;A;k=s\a\]'* ]]; then
            PS2='\[\e]133;A;k=s\a\]'"$PS2"
        fi
        return $status
    }
    # PS0 is expanded in this shell after a command line is read and before it runs:
    # the arithmetic notes that a command ran (for D) and expands to nothing.
    PS0='${__latch_ran:0:$((__latch_ran = 1, 0))}\e]133;C\a'"${PS0-}"
    if [[ "$(builtin declare -p PROMPT_COMMAND 2>/dev/null)" == "declare -a"* ]]; then
        PROMPT_COMMAND=(__latch_precmd "${PROMPT_COMMAND[@]}")
    else
        PROMPT_COMMAND="__latch_precmd${PROMPT_COMMAND:+;$PROMPT_COMMAND}"
    fi
fi
