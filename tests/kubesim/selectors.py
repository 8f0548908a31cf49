"""Field and label selectors: parsing (errors as the apiserver words them) and matching. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


class SelectorError(ValueError):
    """A selector the apiserver would answer with 400 BadRequest; str() is the message."""


# k/k pkg/apis/core/v1/conversion.go: the pod field labels; other kinds get name+namespace.
POD_FIELDS = {
    "metadata.name": lambda o: o["metadata"].get("name", ""),
    "metadata.namespace": lambda o: o["metadata"].get("namespace", ""),
    "spec.nodeName": lambda o: o.get("spec", {}).get("nodeName", ""),
    "spec.host": lambda o: o.get("spec", {}).get("nodeName", ""),
    "spec.restartPolicy": lambda o: o.get("spec", {}).get("restartPolicy", ""),
    "spec.schedulerName": lambda o: o.get("spec", {}).get("schedulerName", ""),
    "spec.serviceAccountName": lambda o: o.get("spec", {}).get("serviceAccountName", ""),
    "spec.hostNetwork": lambda o: str(bool(o.get("spec", {}).get("hostNetwork"))).lower(),
    "status.phase": lambda o: o.get("status", {}).get("phase", ""),
    "status.podIP": lambda o: o.get("status", {}).get("podIP", ""),
    "status.nominatedNodeName": lambda o: o.get("status", {}).get("nominatedNodeName", ""),
}
GENERIC_FIELDS = {k: POD_FIELDS[k] for k in ("metadata.name", "metadata.namespace")}


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()


Matcher = Callable[[Obj], bool]


def parse_field_selector(
    text: str, resource: str, labels: dict[str, Callable[[Obj], str]] | None = None
) -> tuple[Matcher, str | None]:
    """(matcher, the metadata.name it pins or None). Raises SelectorError.

    `labels`: the kind's own field labels (events); else pods' or name+namespace.
    """
    fields = labels or (POD_FIELDS if resource == "pods" else GENERIC_FIELDS)
    checks: list[tuple[Callable[[Obj], str], bool, str]] = []
    pinned: str | None = None
    for term in _split_terms(text):
        m = re.fullmatch(r"([^=!]+?)\s*(==|=|!=)\s*(.*)", term)
        if not m:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        key, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if key not in fields:
            raise SelectorError(f"field label not supported: {key}")
        if key == "metadata.name" and op != "!=":
            pinned = value
        checks.append((fields[key], op != "!=", value))

    def match(obj: Obj) -> bool:
        return all((get(obj) == value) is want for get, want, value in checks)

    return match, pinned


_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def parse_label_selector(text: str) -> Matcher:
    reqs = [_parse_requirement(term, text) for term in _split_terms(text)]

    def match(obj: Obj) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(_holds(req, labels) for req in reqs)

    return match


def _parse_requirement(term: str, whole: str) -> Requirement:
    if m := re.fullmatch(r"!\s*(\S+)", term):
        return Requirement(_key(m.group(1), whole), "!")
    if m := re.fullmatch(r"(\S+)\s+(in|notin)\s*\((.*)\)", term):
        values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
        for value in values:
            _value(value, whole)
        return Requirement(_key(m.group(1), whole), m.group(2), values)
    if m := re.fullmatch(r"([^=!\s]+)\s*(==|=|!=)\s*(\S*)", term):
        op = "!=" if m.group(2) == "!=" else "="
        return Requirement(_key(m.group(1), whole), op, (_value(m.group(3), whole),))
    if re.fullmatch(r"[^=!\s()]+", term):
        return Requirement(_key(term, whole), "exists")
    raise SelectorError(f"unable to parse requirement: found '{term}', expected: identifier")


def _key(key: str, whole: str) -> str:
    if not _LABEL_KEY.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
        raise SelectorError(
            f'unable to parse requirement: <nil>: Invalid value: "{key}": name part must '
            "consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character"
        )
    return key


def _value(value: str, whole: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise SelectorError(
            f'unable to parse requirement: values[0][{whole}]: Invalid value: "{value}": '
            "a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character"
        )
    return value


def _holds(req: Requirement, labels: dict[str, str]) -> bool:
    present = req.key in labels
    if req.op == "exists":
        return present
    if req.op == "!":
        return not present
    if req.op == "=":
        return present and labels[req.key] == req.values[0]
    if req.op == "!=":
        return not present or labels[req.key] != req.values[0]
    if req.op == "in":
        return present and labels[req.key] in req.values
    return not present or labels[req.key] not in req.values


def _split_terms(text: str) -> list[str]:
    """Split on commas outside parentheses; empty text selects everything."""
    terms: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur).strip())
    return [t for t in terms if t]
