"""Shell completion for bash and zsh, written from the argparse parser itself.

Owns `completion_script`: verbs, each verb's options, files where a path is
expected, and session ids (from `runnerd ls -aq`, asking the daemon the line
names with `--socket`/`--url`, else `RUNNERD_SOCKET` or the default) where a
session id is. zsh gets the same
function through its `bashcompinit` layer, so the two shells never differ.
Generated, not hand-kept: a new option completes as soon as it exists.
"""

from __future__ import annotations

import argparse

_FILE_OPTIONS = ("--socket", "--config", "--env-file", "--entry")
_SESSION_VERBS = ("logs", "events", "attach", "stop", "reload")


def _verbs(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {
                name: sorted(o for a in sub._actions for o in a.option_strings)
                for name, sub in action.choices.items()
            }
    return {}


def bash_script(parser: argparse.ArgumentParser) -> str:
    verbs = _verbs(parser)
    cases = "\n".join(f'        {name}) opts="{" ".join(opts)}" ;;' for name, opts in verbs.items())
    return f"""# runnerd completion for bash: eval "$(runnerd completion bash)"
_runnerd() {{
    local cur prev verb opts
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    verb="${{COMP_WORDS[1]}}"
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=( $(compgen -W "{" ".join(verbs)} --help --version" -- "$cur") )
        return
    fi
    case "$prev" in
        {"|".join(_FILE_OPTIONS)}) COMPREPLY=( $(compgen -f -- "$cur") ); return ;;
    esac
    case "$verb" in
{cases}
        *) opts="" ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=( $(compgen -W "$opts" -- "$cur") )
        return
    fi
    case "$verb" in
        {"|".join(_SESSION_VERBS)})
            local i daemon=()  # the same daemon the line names, if it names one
            for ((i = 2; i < COMP_CWORD - 1; i++)); do
                case "${{COMP_WORDS[i]}}" in
                    --socket|--url) daemon+=("${{COMP_WORDS[i]}}" "${{COMP_WORDS[i+1]}}") ;;
                esac
            done
            local ids
            ids="$(runnerd ls -aq "${{daemon[@]}}" 2>/dev/null)"
            COMPREPLY=( $(compgen -W "$ids" -- "$cur") ) ;;
        run|watch) COMPREPLY=( $(compgen -f -- "$cur") ) ;;
        completion) COMPREPLY=( $(compgen -W "bash zsh" -- "$cur") ) ;;
    esac
}}
complete -F _runnerd runnerd
"""


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The script for `shell` ("bash" or "zsh"), to `eval` or put on the completion path."""
    script = bash_script(parser)
    if shell == "zsh":
        header = '# runnerd completion for zsh: eval "$(runnerd completion zsh)"\n'
        return header + "autoload -U +X bashcompinit && bashcompinit\n" + script
    return script
