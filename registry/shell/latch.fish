# latch's shell integration for fish (SPEC §4.6), read through --init-command after
# the user's own configuration: OSC 133 marks from fish's events (not by wrapping
# fish_prompt), and OSC 7. fish keeps commands that begin with a space out of its
# history by itself. No file of the user's is changed.
set -e LATCH_SHELL_INTEGRATION
function __latch_prompt --on-event fish_prompt
    printf '\e]7;file://%s%s\a\e]133;A\a' (prompt_hostname) (string escape --style=url -- $PWD)
end
function __latch_preexec --on-event fish_preexec
    printf '\e]133;C;cmdline_url=%s\a' (string escape --style=url -- $argv[1])
end
function __latch_postexec --on-event fish_postexec
    printf '\e]133;D;%s\a' $status
end
