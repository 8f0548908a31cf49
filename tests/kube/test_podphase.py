"""A pod run's phases and teardown (`runnerd.kube.podphase`) as pure code."""

from __future__ import annotations

import pytest

from runnerd.kube.podphase import (
    TRANSITIONS,
    Phase,
    PhaseError,
    Teardown,
    advance,
    plan_teardown,
    stop_reads_log,
)

CREATED_AND_RUN = [Phase.CREATING, Phase.PENDING, Phase.RUNNING, Phase.ENDING, Phase.ENDED]
ADOPTED = [Phase.ADOPTING, Phase.RUNNING, Phase.ENDING, Phase.ENDED]


@pytest.mark.parametrize("path", [CREATED_AND_RUN, ADOPTED], ids=["created", "adopted"])
def test_podphase_a_run_moves_forward_to_ended(path: list[Phase]) -> None:
    phase = path[0]
    for to in path[1:]:
        phase = advance(phase, to)
    assert phase is Phase.ENDED


@pytest.mark.parametrize("phase", [p for p in Phase if p is not Phase.ENDED])
def test_podphase_every_phase_may_end_at_once(phase: Phase) -> None:
    # A failed start, a pod that ended before it was seen running, a cancellation.
    assert advance(phase, Phase.ENDED) is Phase.ENDED


def test_podphase_no_move_goes_back_or_skips_the_start() -> None:
    moves = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    assert all(
        CREATED_AND_RUN.index(b) > CREATED_AND_RUN.index(a)
        for a, b in moves
        if a in CREATED_AND_RUN
    )
    for wrong in [
        (Phase.RUNNING, Phase.PENDING),
        (Phase.ENDED, Phase.RUNNING),
        (Phase.ENDED, Phase.ENDED),
        (Phase.CREATING, Phase.RUNNING),  # never `Started` before the pod runs
        (Phase.ADOPTING, Phase.PENDING),
        (Phase.PENDING, Phase.ENDING),
    ]:
        with pytest.raises(PhaseError, match=f"from {wrong[0].value} to {wrong[1].value}"):
            advance(*wrong)


@pytest.mark.parametrize(
    ("phase", "released", "reads"),
    [
        (Phase.RUNNING, False, True),  # no attach up yet: the log is the only copy
        (Phase.ENDING, False, True),
        (Phase.RUNNING, True, False),  # the attach has it
        (Phase.PENDING, False, False),
        (Phase.ENDED, False, False),  # the run reads the log itself
    ],
)
def test_podphase_a_stop_reads_the_log_only_while_followed_and_unreleased(
    phase: Phase, released: bool, reads: bool
) -> None:
    assert stop_reads_log(phase, released) is reads


@pytest.mark.parametrize(
    ("cancelled", "detach", "accepted", "plan"),
    [
        (True, True, False, Teardown.LEAVE),
        (True, True, True, Teardown.LEAVE),
        (True, False, True, Teardown.AWAIT_GONE),
        (False, False, True, Teardown.NOTHING),
        (True, False, False, Teardown.DELETE_AND_WAIT),
        (False, False, False, Teardown.DELETE_NOW),
        (False, True, False, Teardown.DELETE_NOW),  # a detach intent on a run that ended anyway
    ],
)
def test_podphase_the_teardown_follows_how_the_run_ended(
    cancelled: bool, detach: bool, accepted: bool, plan: Teardown
) -> None:
    assert plan_teardown(cancelled=cancelled, detach=detach, stop_accepted=accepted) is plan
