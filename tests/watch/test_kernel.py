"""A self-watching app's generations and ports, projected from its kernel's
debug frames (`runnerd.watch.kernel`): the four `Kernel.*` events, the
triggers, tolerance of frames of the wrong shape, the port diff, and the
contract's per-app guarantees over any sequence of frames."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runnerd.contract import PortMapping
from runnerd.watch.kernel import AgentPort, KernelProjection, diff_ports, parse_ports
from runnerd.watch.runs import AppRuns


def event(name: str, payload: Any = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"kind": "event", "timestamp": "2026-01-01T00:00:00Z", "event": name}
    if payload is not None:
        frame["payload"] = payload
    return frame


def tcp(*ports: int) -> tuple[PortMapping, ...]:
    return tuple(PortMapping(port=p, protocol="tcp") for p in ports)


def runs_of(projection: KernelProjection, frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for at, frame in enumerate(frames):
        out.extend(dict(e) for e in projection.feed(frame, now=float(at)).runs)
    return out


def test_kernel_starting_then_stopped_is_one_generation() -> None:
    projection = KernelProjection(AppRuns("web"))
    projection.expect("initial")
    frames = [
        event("Kernel.Starting", {}),
        event("Kernel.Started", {}),
        event("Kernel.Stopped", {"exitCode": 3}),
    ]
    assert runs_of(projection, frames) == [
        {"type": "run", "app": "web", "generation": 1, "phase": "started", "trigger": "initial"},
        {"type": "run", "app": "web", "generation": 1, "phase": "completed", "code": 3,
         "durationMs": 2000},
    ]  # fmt: skip


def test_kernel_the_version_is_carried_when_given_and_only_then() -> None:
    projection = KernelProjection(AppRuns("web"))
    started = runs_of(
        projection,
        [
            event("Kernel.Starting", {"telo": "0.80.0"}),
            event("Kernel.Stopped", {"exitCode": 0}),
            event("Kernel.Starting", {"telo": ""}),
        ],
    )
    assert started[0]["telo"] == "0.80.0"
    assert "telo" not in started[2]


def test_kernel_a_restart_of_its_own_is_watch_and_the_core_s_is_its_trigger() -> None:
    projection = KernelProjection(AppRuns("web"))
    cycle = [event("Kernel.Starting"), event("Kernel.Stopped", {"exitCode": 0})]
    projection.expect("initial")
    triggers = [e["trigger"] for e in runs_of(projection, cycle * 2) if e["phase"] == "started"]
    projection.expect("manual")
    triggers += [e["trigger"] for e in runs_of(projection, cycle * 2) if e["phase"] == "started"]
    projection.expect("resume")
    triggers += [e["trigger"] for e in runs_of(projection, cycle) if e["phase"] == "started"]
    assert triggers == ["initial", "watch", "manual", "watch", "resume"]
    assert projection.runs.generation == 5


def test_kernel_a_load_failure_opens_and_fails_a_generation() -> None:
    projection = KernelProjection(AppRuns("web"))
    projection.expect("initial")
    failure = {"phase": "load", "code": "ERR_MANIFEST_VALIDATION_FAILED", "message": "bad"}
    assert runs_of(projection, [event("Kernel.RunFailed", failure)]) == [
        {"type": "run", "app": "web", "generation": 1, "phase": "started", "trigger": "initial"},
        {"type": "run", "app": "web", "generation": 1, "phase": "failed",
         "reason": "ERR_MANIFEST_VALIDATION_FAILED"},
    ]  # fmt: skip


def test_kernel_a_boot_failure_after_starting_is_not_counted_twice() -> None:
    projection = KernelProjection(AppRuns("web"))
    events = runs_of(
        projection,
        [
            event("Kernel.Starting"),
            event("Kernel.RunFailed", {"phase": "start", "message": "boom"}),
            event("Kernel.Stopped", {"exitCode": 1}),  # after the failure: nothing open
            event("Kernel.RunFailed", {}),
        ],
    )
    assert [(e["generation"], e["phase"], e.get("reason")) for e in events] == [
        (1, "started", None),
        (1, "failed", "boom"),
        (2, "started", None),
        (2, "failed", "run failed"),
    ]


def test_kernel_frames_of_the_wrong_shape_never_raise() -> None:
    projection = KernelProjection(AppRuns("web"))
    frames: list[Any] = [
        {"kind": "log", "stream": "stdout", "line": "Kernel.Starting"},
        {"event": "Kernel.Starting", "payload": "not an object"},  # kind absent: an event
        event("Kernel.Starting"),  # open already: a replayed repeat is ignored
        event("Kernel.Stopped", {"exitCode": True}),
        event("Kernel.Stopped", {"exitCode": 0}),  # nothing open
        event("Kernel.PortsResolved", {"ports": "3000"}),
        event("Kernel.PortsResolved"),
        event("Something.Else", {"ports": []}),
        {"kind": "event", "event": 7},
    ]
    updates = [projection.feed(f, now=1.0) for f in frames]
    assert [len(u.runs) for u in updates] == [0, 1, 0, 1, 0, 0, 0, 0, 0]
    assert updates[3].runs[0]["code"] == 0  # type: ignore[typeddict-item]
    assert all(u.declared is None for u in updates)


def test_kernel_a_crash_without_stopped_ends_the_generation() -> None:
    projection = KernelProjection(AppRuns("web"))
    assert projection.ended(137, now=0.0) is None
    runs_of(projection, [event("Kernel.Starting")])
    ended = projection.ended(137, now=2.0)
    assert ended is not None and ended["phase"] == "completed" and ended["code"] == 137  # type: ignore[typeddict-item]


def test_kernel_ports_resolved_declares_a_set() -> None:
    projection = KernelProjection(AppRuns("web"))
    ports = [
        {"name": "http", "port": 3000, "protocol": "tcp"},
        {"port": 9100, "protocol": "udp"},
        {"port": 80},
        {"port": 80, "protocol": "tcp"},  # the same pair again
        {"port": "3001"},
        {"port": 0},
        {"port": 70000},
        {"port": False},
        "8080",
    ]
    update = projection.feed(event("Kernel.PortsResolved", {"ports": ports}), now=0.0)
    assert update.runs == ()
    assert update.declared == (
        PortMapping(port=3000, protocol="tcp"),
        PortMapping(port=9100, protocol="udp"),
        PortMapping(port=80, protocol="tcp"),
    )
    # An empty set is a set (every port un-declared), not "no announcement".
    assert parse_ports({"ports": []}) == ()


def test_kernel_diff_ports_adds_removes_and_rejects_with_a_reason() -> None:
    apps = {"web": tcp(3000, 3001), "api": tcp(8080)}
    diff = diff_ports("web", tcp(3001, 4000, 8080, 7000), apps, AgentPort("helper", 7000))
    assert diff is not None
    assert diff.ports == tcp(3001, 4000)
    assert (diff.added, diff.removed) == (tcp(4000), tcp(3000))
    assert diff.event() == {
        "type": "endpoints",
        "app": "web",
        "added": [{"host": "", "port": 4000, "protocol": "tcp"}],
        "removed": [{"host": "", "port": 3000, "protocol": "tcp"}],
        "rejected": [
            {"port": 8080, "reason": "app 'api' declares tcp port 8080"},
            {"port": 7000, "reason": "co-resident agent 'helper' listens on tcp port 7000"},
        ],
    }


def test_kernel_diff_ports_same_set_is_no_event_and_udp_is_another_port() -> None:
    apps = {"web": tcp(3000), "api": tcp(8080)}
    assert diff_ports("web", tcp(3000), apps) is None
    udp = (PortMapping(port=8080, protocol="udp"),)
    diff = diff_ports("web", tcp(3000) + udp, apps, AgentPort("helper", 8080))
    assert diff is not None and diff.added == udp and diff.rejected == ()
    assert diff.event() == {
        "type": "endpoints",
        "app": "web",
        "added": [{"host": "", "port": 8080, "protocol": "udp"}],
    }
    # A rejected port is never taken, so it is rejected again next time.
    again = diff_ports("web", tcp(3000, 8080), {"web": tcp(3000), "api": tcp(8080)})
    assert again is not None and again.ports == tcp(3000) and len(again.rejected) == 1


FRAME = st.sampled_from(
    [
        event("Kernel.Starting"),
        event("Kernel.Started"),
        event("Kernel.Stopped", {"exitCode": 0}),
        event("Kernel.RunFailed", {"message": "x"}),
        event("Kernel.PortsResolved", {"ports": [{"port": 80}]}),
        {"kind": "log", "line": "x"},
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(FRAME, st.sampled_from(["initial", "manual", "resume"])), max_size=40))
def test_kernel_any_frames_keep_the_contract_s_run_order(steps: list[Any]) -> None:
    projection = KernelProjection(AppRuns("web"))
    seen: list[Any] = []
    for at, step in enumerate(steps):
        if isinstance(step, str):
            projection.expect(step)  # type: ignore[arg-type]
        else:
            seen.extend(projection.feed(step, now=float(at)).runs)
    open_generation = 0
    for e in seen:
        if e["phase"] == "started":
            assert open_generation == 0 and e["generation"] == projection_gen(seen, e)
            open_generation = e["generation"]
        else:
            assert e["generation"] == open_generation
            open_generation = 0


def projection_gen(seen: list[Any], started: Any) -> int:
    """Generations are 1, 2, … in order of their `started`."""
    return [e for e in seen if e["phase"] == "started"].index(started) + 1


def test_kernel_an_adopted_projection_skips_the_replay_of_what_it_consumed() -> None:
    """After an adoption the kernel replays its frames: the `skip` lifecycle
    frames the previous daemon consumed project nothing; the next do."""
    first = KernelProjection(AppRuns("web"))
    history = [
        event("Kernel.Starting", {}),
        event("Kernel.Stopped", {"exitCode": 0}),
        event("Kernel.PortsResolved", {"ports": [{"port": 3000}]}),
        event("Kernel.Starting", {}),
    ]
    assert [e["generation"] for e in runs_of(first, history)] == [1, 1, 2]
    runs = AppRuns("web")
    runs.adopt(2, True, 0.0)
    adopted = KernelProjection(runs, skip=first.consumed)
    assert first.consumed == 3
    assert runs_of(adopted, history) == []  # the replay: nothing again
    assert adopted.consumed == 3
    after = runs_of(adopted, [event("Kernel.Stopped", {"exitCode": 0}), event("Kernel.Starting")])
    assert [(e["generation"], e["phase"]) for e in after] == [(2, "completed"), (3, "started")]
