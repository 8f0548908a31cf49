"""Human renderings for the listing verbs: tables, ages, statuses. Pure."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart; the last column is not padded."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = []
    for row in [headers, *rows]:
        cells = [str(c).ljust(w) for c, w in zip(row[:-1], widths[:-1], strict=True)]
        lines.append("  ".join([*cells, str(row[-1])]).rstrip())
    return "\n".join(lines)


def parse_time(iso: str) -> float | None:
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


def age(iso: str, now: float | None = None) -> str:
    """`42s`, `5m`, `3h`, `2d`: how long ago `iso` was."""
    then = parse_time(iso)
    if then is None:
        return "?"
    seconds = max(0, int((now if now is not None else time.time()) - then))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def status_text(status: Any, width: int = 48) -> str:
    kind = status.get("kind", "?") if isinstance(status, dict) else "?"
    if kind == "exited":
        text = f"exited {status.get('code')}"
    elif kind == "failed":
        text = f"failed: {status.get('message', '')}"
    else:
        text = str(kind)
    return text if len(text) <= width else text[: width - 1] + "…"


def ports_text(entry: dict[str, Any]) -> str:
    status = entry.get("status") or {}
    endpoints = status.get("endpoints") if isinstance(status, dict) else None
    if endpoints:
        return ",".join(f"{e.get('host')}:{e.get('port')}/{e.get('protocol')}" for e in endpoints)
    return ",".join(f"{p.get('port')}/{p.get('protocol')}" for p in entry.get("ports") or [])


def apps_text(entry: dict[str, Any]) -> str:
    """A watch session's apps with their latest generation (`web#3,api#1`), and
    its agent (`+agent:NAME`); `-` for a run session."""
    if entry.get("mode") != "watch":
        return "-"
    apps = ",".join(f"{a.get('name')}#{a.get('generation', 0)}" for a in entry.get("apps") or [])
    agent = f" +agent:{entry['agent']}" if entry.get("agent") else ""
    return (apps or "-") + agent
