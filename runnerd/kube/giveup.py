"""The pods a stopping runnerd could not delete, remembered for its successor.

Owns one file in `runner.state_dir` (`FILE`: a JSON list of pod names).
A SIGTERM stops every session, and a stopped session's pod is deleted; with
the apiserver silent, refusing or failing, that delete is given up on
(abandoned in `runnerd.kube.ledger`) and the pod outlives the process.
Without this file the next runnerd (`on_restart = "adopt"`) cannot tell such a pod from
one a crash or a detach left, and would bring a session its clients saw
`stopped` back as `running`. With it, the successor deletes those pods
instead of adopting them.

`load` and `save` never raise: a file that cannot be read is logged and
taken as empty; one that cannot be written is logged (the pods are then
adopted, as they were before this file existed).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from runnerd.atomic_file import write_atomic

log = logging.getLogger(__name__)

# A dot file: the session state files' pruning (`StateDir`) never touches it.
FILE = ".kube-undeleted-pods"


def load(state_dir: Path) -> set[str]:
    """The pod names the previous process gave up deleting (empty if none)."""
    path = state_dir / FILE
    try:
        names = json.loads(path.read_bytes())
    except FileNotFoundError:
        return set()
    except (OSError, ValueError) as exc:
        log.warning("unreadable %s: %s; pods it listed may be adopted", path, exc)
        return set()
    if not isinstance(names, list):
        log.warning("unreadable %s: not a list of pod names", path)
        return set()
    return {n for n in names if isinstance(n, str)}


def save(state_dir: Path, names: Iterable[str]) -> None:
    """Replace the file with `names` (removing it when there are none)."""
    path = state_dir / FILE
    wanted = sorted(set(names))
    try:
        if not wanted:
            path.unlink(missing_ok=True)
            return
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(path, json.dumps(wanted).encode())
    except OSError as exc:
        log.error(
            "cannot write %s: %s; the next runnerd may adopt the pods %s instead of deleting them",
            path,
            exc,
            ", ".join(wanted),
        )
    else:
        if wanted:
            log.warning(
                "%d session pods could not be deleted at shutdown; the next runnerd"
                " deletes them: %s",
                len(wanted),
                ", ".join(wanted),
            )
