"""A run session's cost on the Kubernetes backend, as rows for `python -m bench`.

`python -m bench kuberun` runs the test cluster (tests/kubesim, kubelet
included) in this process and a real `runnerd serve` on it, then N
sequential sessions (`print hello` then `exit 0`, as `bench.kube`),
alternated with the same POST refused (400: the HTTP stack, the route and
the body parse; the 201's floor, measured in the same run): POST → 201
against that floor, and the apiserver requests per session by verb (issue
22's goal: ≤ 3 where the attach is up before the container starts; the
upstream runner makes 3, losing the output written before its attach).
`RUNNERD_BENCH_SESSIONS` sets N (default 20). Printed, never asserted.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path

import trio

from bench.kube import _pod_added, one_session, post_floor
from tests.kube.daemon import kube_daemon
from tests.kubesim.server import open_kubesim

Row = tuple[str, str, str]


async def bench_kuberun() -> list[Row]:
    sessions = int(os.environ.get("RUNNERD_BENCH_SESSIONS", "20"))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="runnerd-bench-kube-") as tmp:
        async with open_kubesim(Path(tmp)) as sim, trio.open_nursery() as nursery:
            seen: dict[str, float] = {}
            nursery.start_soon(_pod_added, sim, seen)
            async with kube_daemon(sim, Path(tmp)) as daemon, daemon.client() as client:
                await sim.stats.wait_until(lambda s: s.watches_open == 1)
                before = sim.stats.snapshot()
                answered, floors = [], []
                for _ in range(sessions):  # alternated: load drifts hit both alike
                    floors.append(await post_floor(client))
                    answered.append((await one_session(client, seen, []))[3])
                after = sim.stats.snapshot()
            nursery.cancel_scope.cancel()
    verbs = {
        verb: (count - before["requestsByVerb"].get(verb, 0)) / sessions
        for verb, count in after["requestsByVerb"].items()
        if count != before["requestsByVerb"].get(verb, 0)
    }
    floor, median = statistics.median(floors), statistics.median(answered)
    by_verb = ", ".join(f"{verb} {n:g}" for verb, n in sorted(verbs.items()))
    return [
        (
            f"POST → 201 (kubernetes, {sessions} sessions; load {load})",
            f"{median * 1e3:.1f} ms median; {median / floor:.2f}× the same POST refused"
            f" ({floor * 1e3:.1f} ms)",
            "≤ the upstream runner",
        ),
        (
            "apiserver requests per run session",
            f"{sum(verbs.values()):.2f} ({by_verb}; `get`: the attach and the pods/log reads)",
            "≤ 3 where the attach is up before the container starts",
        ),
    ]


if __name__ == "__main__":
    for name, figure, target in trio.run(bench_kuberun):
        print(f"{name:50} {figure} ({target})")
