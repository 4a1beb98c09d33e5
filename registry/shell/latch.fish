# latch's shell integration for fish (SPEC §4.6), read through --init-command after
# the user's own configuration: OSC 133 marks from fish's events (not by wrapping
# fish_prompt), and OSC 7. fish keeps commands that begin with a space out of its
# history by itself. No file of the user's is changed.
set -e LATCH_SHELL_INTEGRATION
function __latch_prompt --on-event fish_prompt
    set -e __latch_cont
    printf '\e]7;file://%s%s\a\e]133;A\a' (prompt_hostname) (string escape --style=url -- $PWD)
end
function __latch_preexec --on-event fish_preexec
    set -e __latch_cont
    printf '\e]133;C;cmdline_url=%s\a' (string escape --style=url -- $argv[1])
end
function __latch_postexec --on-event fish_postexec
    printf '\e]133;D;%s\a' $status
end
# fish has no continuation prompt: Enter on an incomplete line (an unclosed quote)
# adds a line to the editor. Enter marks that as bash's and zsh's PS2 are marked,
# A;k=s, then does what it always does.
function __latch_enter
    commandline --is-valid
    if test $status -eq 2
        set -g __latch_cont 1
        printf '\e]133;A;k=s\a'
    end
    commandline -f execute
end
bind \r __latch_enter
bind -M insert \r __latch_enter
# C-c then cancels the incomplete line, whenever it comes: fish takes a C-c that
# arrives while a function runs (this Enter's) as SIGINT and leaves the line, so
# the handler cancels it. The cancelled line is then marked with a fresh A, which
# fish, redrawing its prompt without a fish_prompt event, does not give.
function __latch_sigint --on-signal SIGINT
    if set -q __latch_cont
        commandline -f cancel-commandline
    end
end
function __latch_cancel --on-event fish_cancel
    if set -q __latch_cont
        set -e __latch_cont
        printf '\e]133;A\a'
    end
end
