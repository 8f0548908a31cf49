"""The fake backend's own rules, where the conformance cases do not reach."""

from __future__ import annotations

import pytest

from tests.conformance.fake import parse_script


def test_fake_parse_script_reads_the_sh_subset() -> None:
    script = 'read line; echo "got $line"\nexec sleep 1\n\nexit 5'
    assert parse_script(script) == [
        ["read", "line"],
        ["echo", "got $line"],
        ["sleep", "1"],
        ["exit", "5"],
    ]


@pytest.mark.parametrize(
    "script", ["cat /etc/passwd", "echo 'unbalanced", "read", "sleep forever", "exit now"]
)
def test_fake_parse_script_refuses_what_it_cannot_run(script: str) -> None:
    with pytest.raises(ValueError):
        parse_script(script)
