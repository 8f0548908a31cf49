"""The list of pods a stopping runnerd could not delete (`runnerd.kube.giveup`)."""

from __future__ import annotations

from pathlib import Path

from runnerd.kube import giveup


def test_saved_names_load_back_and_none_removes_the_file(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert giveup.load(state) == set()
    giveup.save(state, ["runnerd-b", "runnerd-a", "runnerd-a"])
    assert giveup.load(state) == {"runnerd-a", "runnerd-b"}
    giveup.save(state, [])
    assert not (state / giveup.FILE).exists()
    assert giveup.load(state) == set()


def test_a_garbled_file_is_taken_as_empty(tmp_path: Path) -> None:
    for garbage in (b"{not json", b'{"a": 1}', b'["runnerd-a", 3]'):
        (tmp_path / giveup.FILE).write_bytes(garbage)
        assert giveup.load(tmp_path) <= {"runnerd-a"}
    (tmp_path / giveup.FILE).write_bytes(b"{not json")
    assert giveup.load(tmp_path) == set()
