"""`Table`: a strict reader of one TOML table. Pure.

Owns the typed readers every config section uses (strings, positive ints,
seconds, string lists, choices), each naming the full dotted key in its
`ConfigError`, and refusing keys the section does not know (with a
did-you-mean). `show` renders a value as an operator wrote it.
`BackendTables` keeps the backends' tables, unread, for their providers.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from runnerd.config.lines import find_key_line
from runnerd.config.model import ConfigError, toml_key


def show(value: object) -> str:
    """A value as an operator wrote it, for an error message."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    return repr(value)


class Table:
    """One TOML table under a dotted key path. Refuses keys it does not know,
    and every reader names the full key path in its error."""

    def __init__(self, data: object, path: str, known: tuple[str, ...] | None) -> None:
        if not isinstance(data, dict):
            raise ConfigError(path, f"must be a table, got {show(data)}")
        self.data = cast(dict[str, object], data)
        self.path = path
        for key in self.data:
            if known is not None and key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise ConfigError(self.key(key), f"unknown key{hint}")

    def key(self, name: str) -> str:
        return f"{self.path}.{toml_key(name)}" if self.path else toml_key(name)

    def table(self, name: str, known: tuple[str, ...] | None) -> Table:
        return Table(self.data.get(name, {}), self.key(name), known)

    def string(self, name: str, default: str, *, empty_ok: bool = False) -> str:
        value = self.data.get(name, default)
        if not isinstance(value, str) or (not empty_ok and not value.strip()):
            raise ConfigError(self.key(name), f"must be a non-empty string, got {show(value)}")
        return value

    def optional_string(self, name: str) -> str | None:
        """An optional string; blank counts as unset."""
        value = self.string(name, "", empty_ok=True).strip()
        return value or None

    def positive_int(self, name: str, default: int) -> int:
        value = self.data.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(self.key(name), f"must be a positive integer, got {show(value)}")
        return value

    def seconds(self, name: str, default: float, *, zero_ok: bool = False) -> float:
        value = self.data.get(name, default)
        if isinstance(value, int | float) and not isinstance(value, bool):
            if math.isfinite(value) and (value > 0 or (zero_ok and value == 0)):
                return float(value)
        word = "a non-negative" if zero_ok else "a positive"
        raise ConfigError(self.key(name), f"must be {word} number of seconds, got {show(value)}")

    def string_list(self, name: str, *, empty_ok: bool = True) -> tuple[str, ...] | None:
        """None when absent; every item a non-empty string."""
        if name not in self.data:
            return None
        value = self.data[name]
        if not isinstance(value, list) or (not value and not empty_ok):
            raise ConfigError(self.key(name), f"must be a list of strings, got {show(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item:
                raise ConfigError(
                    f"{self.key(name)}[{i}]", f"must be a non-empty string, got {show(item)}"
                )
        return tuple(value)

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.data.get(name, default)
        if not isinstance(value, str) or value not in choices:
            raise ConfigError(
                self.key(name), f"must be one of {', '.join(choices)}, got {show(value)}"
            )
        return value


@dataclass(frozen=True)
class BackendTables:
    """The backend tables as the file wrote them, kept for the configured
    backend's provider to parse (`runnerd.backends.parse_config`): this layer
    parses the core tables and names no backend.

    `tables`: each built backend's table that the file has (name → its keys);
    `base_dir`: what its relative paths resolve against; `text`: the main
    file's text, where a backend's error finds its line (None: not from a file).
    """

    tables: Mapping[str, Mapping[str, object]]
    base_dir: Path
    text: str | None = field(default=None, repr=False)

    def table(self, name: str, known: tuple[str, ...]) -> Table:
        """The `[name]` table (empty when the file has none), refusing any key
        but `known` (naming it, with a did-you-mean).

        Raises:
            ConfigError: an unknown key, e.g. `local.workdri: unknown key`.
        """
        return Table(dict(self.tables.get(name, {})), name, known)

    def located(self, exc: ConfigError) -> ConfigError:
        """`exc` with the line of its key in the main file, when known."""
        line = find_key_line(self.text, exc.key) if self.text and exc.key else None
        return exc if line is None else ConfigError(exc.key, exc.problem, line)
