"""Where a key sits in a TOML file: the line an error points the operator to.

Owns `find_key_line`. Pure. tomllib gives values without positions, so the
text is scanned once more: table headers (`[a.b]`, `[[a]]`) set the current
table, `key = value` lines (bare, quoted or dotted keys) name a full key path,
and the line whose path is the longest prefix of the wanted key wins (so a
missing key points at its table's header). Values spanning lines (arrays,
inline tables, multi-line strings) are skipped, never read as keys. A file
this scanner misreads gets no line number, never a wrong error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def split_key(path: str) -> list[str] | None:
    """`apps."a.b".env[0]` → ["apps", "a.b", "env"]; None if malformed."""
    parts: list[str] = []
    i = 0
    while i < len(path):
        if path[i] in " \t.":
            i += 1
            continue
        if path[i] == "[":  # an array index: not a key
            end = path.find("]", i)
            if end < 0:
                return None
            i = end + 1
            continue
        if path[i] in "\"'":
            end = path.find(path[i], i + 1)
            if end < 0:
                return None
            parts.append(path[i + 1 : end])
            i = end + 1
            continue
        match = _BARE.match(path, i)
        if match is None:
            return None
        parts.append(match.group())
        i = match.end()
    return parts


def _unquoted(text: str) -> Iterator[tuple[int, str]]:
    """Each character of `text` outside a quoted string, with its index."""
    quote = ""
    for i, char in enumerate(text):
        if quote:
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        else:
            yield i, char


def _code(line: str) -> str:
    """`line` without its comment (a `#` outside quotes)."""
    return next((line[:i] for i, char in _unquoted(line) if char == "#"), line)


def _opens(value: str) -> int:
    """How many brackets/braces `value` leaves open (outside strings)."""
    return sum(1 if char in "[{" else -1 for _, char in _unquoted(value) if char in "[{]}")


def _key_and_value(code: str) -> tuple[str, str] | None:
    return next(((code[:i], code[i + 1 :]) for i, char in _unquoted(code) if char == "="), None)


def _paths(text: str) -> list[tuple[int, list[str]]]:
    """(line number, full key path) of every header and key line."""
    found: list[tuple[int, list[str]]] = []
    table: list[str] = []
    depth = 0
    in_string = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        if in_string:
            if in_string in raw:
                in_string = ""
            continue
        code = _code(raw).strip()
        if depth > 0:
            depth += _opens(code)
            continue
        if code.startswith("["):
            header = split_key(code.strip("[]"))
            if header is not None:
                table = header
                found.append((number, table))
            continue
        pair = _key_and_value(code)
        if pair is None:
            continue
        key = split_key(pair[0])
        if key is not None:
            found.append((number, table + key))
        value = pair[1].strip()
        for fence in ('"""', "'''"):
            if value.startswith(fence) and value.count(fence) == 1:
                in_string = fence
        depth = max(0, _opens(value))
    return found


def find_key_line(text: str, key: str) -> int | None:
    """The 1-based line of `key` (a dotted path as errors name it) in the
    TOML `text`, or of its nearest enclosing table; None if neither is found."""
    wanted = split_key(key)
    if not wanted:
        return None
    best: tuple[int, int] | None = None  # (matched length, line)
    for number, path in _paths(text):
        if path and path == wanted[: len(path)]:
            if best is None or len(path) > best[0]:
                best = (len(path), number)
    return None if best is None else best[1]
