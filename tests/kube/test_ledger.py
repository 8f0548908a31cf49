"""The pod ledger (`runnerd.kube.ledger`) as pure code: time passed in as `now`."""

from __future__ import annotations

from runnerd.kube.ledger import ABANDONED_KEEP_S, PodLedger


def test_ledger_a_created_pod_is_live_until_its_teardown() -> None:
    ledger = PodLedger()
    ledger.created("runnerd-a")
    assert ledger.is_live("runnerd-a") and ledger.live == {"runnerd-a"}
    ledger.torn_down("runnerd-a", deleted=True, now=5.0)
    assert not ledger.is_live("runnerd-a") and ledger.abandoned == set()


def test_ledger_a_teardown_that_did_not_delete_leaves_the_pod_to_the_sweep() -> None:
    ledger = PodLedger()
    ledger.created("runnerd-a")
    ledger.torn_down("runnerd-a", deleted=False, now=5.0)
    assert ledger.live == set() and ledger.abandoned == {"runnerd-a"}
    assert ledger.take_landed({"runnerd-a"}, now=6.0) == ["runnerd-a"]
    # Still abandoned until a delete succeeds: the next sweep tries again.
    assert ledger.take_landed({"runnerd-a"}, now=8.0) == ["runnerd-a"]
    ledger.swept("runnerd-a")
    assert ledger.abandoned == set() and ledger.take_landed({"runnerd-a"}, now=9.0) == []


def test_ledger_a_create_given_up_on_is_swept_only_once_its_run_let_go() -> None:
    ledger = PodLedger()
    ledger.created("runnerd-a")
    ledger.gave_up_create("runnerd-a", now=1.0)
    # Its run still owns the name (its teardown comes next): not the sweep's yet.
    assert ledger.take_landed({"runnerd-a"}, now=2.0) == []
    ledger.torn_down("runnerd-a", deleted=True, now=3.0)  # a delete of a pod not there yet
    assert ledger.take_landed({"runnerd-a"}, now=4.0) == ["runnerd-a"]


def test_ledger_an_abandoned_pod_never_seen_is_forgotten_after_the_keep() -> None:
    ledger = PodLedger()
    ledger.gave_up_create("runnerd-a", now=0.0)
    ledger.gave_up_create("runnerd-b", now=0.0)
    # Seen: its time is refreshed, so it is kept past the first keep.
    assert ledger.take_landed({"runnerd-b"}, now=ABANDONED_KEEP_S) == ["runnerd-b"]
    assert ledger.take_landed(set(), now=ABANDONED_KEEP_S) == []
    assert ledger.abandoned == {"runnerd-a", "runnerd-b"}  # exactly the keep: not yet
    assert ledger.take_landed(set(), now=ABANDONED_KEEP_S + 1) == []
    assert ledger.abandoned == {"runnerd-b"}
    assert ledger.take_landed(set(), now=2 * ABANDONED_KEEP_S + 1) == []
    assert ledger.abandoned == set()


def test_ledger_a_stop_accepted_is_remembered_until_the_teardown() -> None:
    ledger = PodLedger()
    ledger.stop_accepted("runnerd-gone")  # no run owns it (a stop after the end): nothing kept
    assert not ledger.is_stopping("runnerd-gone")
    ledger.created("runnerd-a")
    assert not ledger.is_stopping("runnerd-a")
    ledger.stop_accepted("runnerd-a")
    assert ledger.is_stopping("runnerd-a") and ledger.is_live("runnerd-a")
    ledger.torn_down("runnerd-a", deleted=True, now=1.0)
    assert not ledger.is_stopping("runnerd-a") and not ledger.is_live("runnerd-a")


def test_ledger_the_previous_process_stops_are_abandoned_from_the_start() -> None:
    ledger = PodLedger(["runnerd-old"], now=10.0)
    assert ledger.stopped_before == {"runnerd-old"} and ledger.abandoned == {"runnerd-old"}
    assert ledger.take_landed({"runnerd-old", "runnerd-other"}, now=11.0) == ["runnerd-old"]


def test_ledger_undeleted_keeps_what_may_still_exist() -> None:
    ledger = PodLedger(["runnerd-old", "runnerd-vanished"], now=0.0)
    ledger.created("runnerd-detached")  # a detach's pod stays live: the successor adopts it
    ledger.take_landed({"runnerd-old"}, now=ABANDONED_KEEP_S + 1)  # forgets runnerd-vanished
    ledger.created("runnerd-refused")
    ledger.torn_down("runnerd-refused", deleted=False, now=ABANDONED_KEEP_S + 2)
    # Not listed yet: every name the previous process gave up on is kept.
    assert ledger.undeleted(None) == {"runnerd-old", "runnerd-vanished", "runnerd-refused"}
    # Listed: the previous process's only if the cluster still has them.
    assert ledger.undeleted({"runnerd-old"}) == {"runnerd-old", "runnerd-refused"}
    assert ledger.undeleted(set()) == {"runnerd-old", "runnerd-refused"}


def test_ledger_unadopted_watch_pods_are_given_up_on_and_adopted_ones_spared() -> None:
    ledger = PodLedger()
    ledger.created("runnerd-a-000000")  # adopted by its session
    left = ledger.abandon(["runnerd-a-000000", "runnerd-b-000000"], now=5.0)
    assert left == ["runnerd-b-000000"]
    assert ledger.take_landed({"runnerd-a-000000", "runnerd-b-000000"}, now=6.0) == [
        "runnerd-b-000000"
    ]
