"""A directory (or one file) as a `/v1` bundle, the way a user expects. Pure.

Owns `collect_bundle`: walk the directory, skip what a user never means to
send (`.git`, `node_modules`, and whatever the `.gitignore` files in the tree
exclude, with git's rules: last match wins, `!` re-includes, a trailing `/`
matches directories only, a `/` elsewhere anchors the pattern to its
`.gitignore`'s directory, `**` spans directories, and nothing inside an
excluded directory comes back), and pick the entry.

The `/v1` bundle carries text: a file that is not UTF-8 is left out and named
in `Bundle.skipped`, never sent mangled. The entry is `--entry` when given,
else the only file, else the first of `DEFAULT_ENTRIES` present.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ALWAYS_SKIPPED = (".git", "node_modules")
# A watch session's workspace lists none of these (the contract): `.telo` is
# the kernel's own cache there, which a local one must not overwrite.
WATCH_SKIPPED = (*ALWAYS_SKIPPED, ".telo")
DEFAULT_ENTRIES = ("telo.yaml", "telo.yml", "main.sh", "main.py", "main.js", "index.js")


class BundleError(Exception):
    """The path cannot be bundled; the message says why and what to do."""


@dataclass
class Bundle:
    entry: str
    files: list[tuple[str, str]] = field(default_factory=list)  # (relative path, text)
    skipped: list[str] = field(default_factory=list)  # not UTF-8 text

    def as_json(self) -> dict[str, object]:
        return {
            "entryRelativePath": self.entry,
            "files": [{"relativePath": p, "contents": c} for p, c in self.files],
        }


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    anchored: bool
    base: str  # the .gitignore's directory, relative to the bundle root ("" at the top)


def _glob_to_regex(glob: str) -> str:
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[" and "]" in glob[i + 1 :]:
            close = glob.index("]", i + 1)
            body = glob[i + 1 : close].replace("\\", "\\\\")
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = close + 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return "".join(out)


def parse_gitignore(text: str, base: str = "") -> list[_Rule]:
    """The rules of one `.gitignore` living in directory `base`."""
    rules = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        line = line[1:] if negate else line.removeprefix("\\")
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        line = line.lstrip("/")
        if not line:
            continue
        regex = re.compile(_glob_to_regex(line) + r"\Z")
        rules.append(_Rule(regex, negate, dir_only, anchored, base))
    return rules


def is_ignored(rules: list[_Rule], rel_path: str, is_dir: bool) -> bool:
    """Whether `rel_path` (relative to the bundle root, `/`-separated) is excluded."""
    ignored = False
    for rule in rules:
        if rule.dir_only and not is_dir:
            continue
        if rule.base and not rel_path.startswith(rule.base + "/"):
            continue
        local = rel_path[len(rule.base) + 1 :] if rule.base else rel_path
        target = local if rule.anchored else local.rsplit("/", 1)[-1]
        if rule.regex.match(target):
            ignored = not rule.negate
    return ignored


def _read_text(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return None
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror or exc}") from exc


def iter_files(root: Path, skipped: tuple[str, ...] = ALWAYS_SKIPPED) -> Iterator[tuple[str, Path]]:
    """Every file of the directory `root` a bundle takes, as (relative path,
    path), in a stable order: directories named in `skipped` and what
    `.gitignore` excludes are left out (module docstring). `runnerd watch`
    bundles and syncs the same set, with `WATCH_SKIPPED`."""
    rules: list[_Rule] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        if ".gitignore" in filenames:
            try:
                text = (Path(dirpath) / ".gitignore").read_text(errors="replace")
            except OSError:  # gone since the listing (an editor's rename)
                text = ""
            rules = rules + parse_gitignore(text, rel_dir)

        def rel(name: str, base: str = rel_dir) -> str:
            return f"{base}/{name}" if base else name

        dirnames[:] = sorted(
            d for d in dirnames if d not in skipped and not is_ignored(rules, rel(d), True)
        )
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_file() and not is_ignored(rules, rel(name), False):
                yield rel(name), path


def _walk(
    root: Path, skip: tuple[str, ...] = ALWAYS_SKIPPED
) -> tuple[list[tuple[str, str]], list[str]]:
    files: list[tuple[str, str]] = []
    skipped: list[str] = []
    for rel_path, path in iter_files(root, skip):
        contents = _read_text(path)
        if contents is None:
            skipped.append(rel_path)
        else:
            files.append((rel_path, contents))
    return files, skipped


def collect_bundle(
    path: Path, entry: str | None = None, skip: tuple[str, ...] = ALWAYS_SKIPPED
) -> Bundle:
    """Bundle `path` (a directory, or one file that is also the entry).

    Raises:
        BundleError: no such path, nothing to send, or no entry can be picked.
    """
    if path.is_file():
        text = _read_text(path)
        if text is None:
            raise BundleError(f"{path} is not UTF-8 text; a bundle carries text files")
        if entry not in (None, path.name):
            raise BundleError(f"--entry {entry!r} is not {path.name}, the one file given")
        return Bundle(entry=path.name, files=[(path.name, text)])
    if not path.is_dir():
        raise BundleError(f"{path}: no such file or directory")
    files, skipped = _walk(path, skip)
    names = [p for p, _ in files]
    if not files:
        raise BundleError(f"{path}: no files to send (everything is ignored or not text)")
    if entry is not None:
        wanted = Path(entry).as_posix().removeprefix("./")
        if wanted not in names:
            raise BundleError(f"--entry {wanted!r} is not a file of the bundle")
        return Bundle(wanted, files, skipped)
    if len(files) == 1:
        return Bundle(names[0], files, skipped)
    for candidate in DEFAULT_ENTRIES:
        if candidate in names:
            return Bundle(candidate, files, skipped)
    top = ", ".join(n for n in names if "/" not in n)
    raise BundleError(f"{path}: which file runs? give --entry FILE (top-level files: {top})")


def collect_tree(path: Path, entry: str, skip: tuple[str, ...] = WATCH_SKIPPED) -> Bundle:
    """Bundle the directory `path` with `entry` as its entry, whether or not
    it is one of its files (a watch session's apps name their own entries,
    which may be written later). Raises BundleError: not a directory."""
    if not path.is_dir():
        raise BundleError(f"{path}: not a directory")
    files, skipped = _walk(path, skip)
    return Bundle(entry, files, skipped)


def body_size(body: object) -> int:
    """The bytes `body` takes as the JSON request the daemon's limit applies to."""
    return len(json.dumps(body).encode())
