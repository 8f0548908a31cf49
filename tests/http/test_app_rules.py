"""`runnerd.http.app.LazyBuildRule`: a route built into a URL gives what
werkzeug's own rule gives, and the app's routes match as before."""

from __future__ import annotations

import pytest
from quart.routing import QuartRule
from werkzeug.routing import Map

from runnerd.http.app import LazyBuildRule

PATTERNS = ["/v1/health", "/v1/sessions/<session_id>/events", "/v1/files/<path:path>"]
VALUES = [{}, {"session_id": "s-1"}, {"session_id": "a b/c", "since": "7"}, {"path": "x/y z"}]


def _map(rule_class: type[QuartRule]) -> Map:
    return Map([rule_class(p, endpoint=p) for p in PATTERNS], strict_slashes=False)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_app_rules_build_the_urls_werkzeug_builds(pattern: str) -> None:
    lazy, eager = _map(LazyBuildRule).bind("runnerd"), _map(QuartRule).bind("runnerd")
    for values in VALUES:
        for append_unknown in (True, False):
            try:
                expected = eager.build(pattern, values, append_unknown=append_unknown)
            except Exception as exc:  # a missing value: the same refusal
                with pytest.raises(type(exc)):
                    lazy.build(pattern, values, append_unknown=append_unknown)
            else:
                assert lazy.build(pattern, values, append_unknown=append_unknown) == expected


def test_app_rules_match_as_before() -> None:
    lazy, eager = _map(LazyBuildRule).bind("runnerd"), _map(QuartRule).bind("runnerd")
    for path in ("/v1/health", "/v1/sessions/s-1/events", "/v1/files/a/b"):
        assert lazy.match(path) == eager.match(path)
