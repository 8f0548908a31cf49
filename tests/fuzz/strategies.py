"""Hypothesis strategies for the fuzz suite: what a hostile or broken client sends.

Bodies follow the contract's shapes with hostile leaves (wrong types, lone
surrogates, deep nesting, unknown fields) or are no JSON at all. No body
generated here can start a workload that runs generated text: images are
never a configured runtime, so a start is refused at admission at the
latest (or, for the one fixed safe script, runs `exit 0`).

`FUZZ` is the settings every fuzz test uses: bounded (the suite must stay
fast), deterministic (a failure reproduces), no example database on disk.
`RUNNERD_FUZZ_EXAMPLES` raises the example count for a longer local run.
"""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FUZZ = settings(
    max_examples=int(os.environ.get("RUNNERD_FUZZ_EXAMPLES", "40")),
    deadline=None,
    database=None,
    derandomize="RUNNERD_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Text with the awkward cases over-represented: lone surrogates, NUL, controls.
AWKWARD = st.sampled_from(["\ud800", "\udfff", "\x00", "\x1b[2J", "..", "/", "\\", "é", "\u202e"])
TEXT = st.one_of(st.text(max_size=20), AWKWARD, st.lists(AWKWARD, max_size=4).map("".join))

LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT
)  # fmt: skip
JSON_VALUE = st.recursive(
    LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=12,
)
# Runtime names are "sh" and "python": never pick one, so no generated text runs.
IMAGE = TEXT.filter(lambda image: image not in ("sh", "python"))


def _maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(value, JSON_VALUE)


CONFIG = st.fixed_dictionaries(
    {},
    optional={
        "image": _maybe(IMAGE),
        "pullPolicy": _maybe(st.sampled_from(["missing", "always", "never"])),
        "registryUrl": _maybe(TEXT),
        "extra": JSON_VALUE,
    },
)
FILE = st.fixed_dictionaries({}, optional={"relativePath": _maybe(TEXT), "contents": _maybe(TEXT)})
BUNDLE = st.fixed_dictionaries(
    {},
    optional={"entryRelativePath": _maybe(TEXT), "files": _maybe(st.lists(FILE, max_size=3))},
)
PORT = st.fixed_dictionaries(
    {}, optional={"port": _maybe(st.integers()), "protocol": _maybe(st.sampled_from(["tcp"]))}
)
START = st.fixed_dictionaries(
    {},
    optional={
        "env": _maybe(st.dictionaries(TEXT, _maybe(TEXT), max_size=3)),
        "bundle": _maybe(BUNDLE),
        "config": _maybe(CONFIG),
        "app": _maybe(TEXT),
        "ports": _maybe(st.lists(PORT, max_size=2)),
        "inspect": _maybe(st.booleans()),
        "registryUrl": JSON_VALUE,
    },
)
PROBE = st.fixed_dictionaries({}, optional={"config": _maybe(CONFIG), "env": JSON_VALUE})


def deep(depth: int) -> bytes:
    return b'{"env": {}, "x": ' + b"[" * depth + b"]" * depth + b"}"


# A request body as bytes: shaped JSON, any JSON, deep nesting, or no JSON.
BODY = st.one_of(
    st.one_of(START, PROBE, JSON_VALUE).map(lambda value: json.dumps(value).encode()),
    st.integers(min_value=1, max_value=3000).map(deep),
    st.binary(max_size=64),
)
# A header value a client can put on the wire (no surrounding whitespace).
HEADER_TEXT = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40
).map(str.strip)
CURSOR = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str), HEADER_TEXT
)  # fmt: skip
