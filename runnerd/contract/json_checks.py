"""Checks on a decoded JSON request body before its schema. Pure.

Owns the two limits every body meets: nesting depth (`MAX_JSON_DEPTH`) and
text that UTF-8 can carry (no lone surrogates, which JSON's `\\ud800`
escapes can smuggle in and which no file, env value or log line can hold).
Iterative, so the check itself can never hit Python's recursion limit.
"""

from __future__ import annotations

from typing import Any

# No body of the contract nests more than 4 levels; 64 leaves room for what
# clients add (ignored) and keeps every walk over the body far from Python's
# recursion limit (json.loads itself raises RecursionError near 1,000).
MAX_JSON_DEPTH = 64


class JsonCheckError(ValueError):
    """A body over a limit; the message names the limit or where the text is."""


def check_tree(data: Any) -> None:
    """Depth and text checks over a decoded body, iteratively (no recursion).

    Raises:
        JsonCheckError: nested deeper than MAX_JSON_DEPTH, or a key or string
            holds a lone surrogate (not encodable as UTF-8: no file, env
            value or log line can carry it); the message names where.
    """
    stack: list[tuple[Any, str, int]] = [(data, "body", 1)]
    while stack:
        node, where, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise JsonCheckError(f"body nests deeper than the limit of {MAX_JSON_DEPTH} levels")
        if isinstance(node, str):
            _check_text(node, where)
        elif isinstance(node, dict):
            for key, value in node.items():
                _check_text(key, f"{where} key")
                stack.append((value, f"{where}.{key}", depth + 1))
        elif isinstance(node, list):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(node))


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = where.encode("utf-8", "backslashreplace").decode("ascii", "replace")
        raise JsonCheckError(
            f"{shown} contains a lone surrogate (\\ud800-\\udfff), which is not valid text"
        ) from None
