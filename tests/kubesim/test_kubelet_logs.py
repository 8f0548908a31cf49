"""Container logs, pure: line splitting, tail/limit/timestamps, follow, the kubelet's 400s."""

from __future__ import annotations

import re

import trio

from tests.kubesim.kubelet_logs import ContainerLog, LogOptions, read_log, validate_log_target


async def body(log: ContainerLog, opts: LogOptions) -> bytes:
    return b"".join([chunk async for chunk in read_log(log, opts)])


async def test_lines_are_split_per_stream_and_partial_lines_wait() -> None:
    log = ContainerLog()
    log.write(1, b"one\ntw")
    log.write(2, b"err\n")
    log.write(1, b"o\nthr")
    assert await body(log, LogOptions()) == b"one\nerr\ntwo\n"  # "thr" is not a line yet
    log.end()
    assert await body(log, LogOptions()) == b"one\nerr\ntwo\nthr"
    assert [line.stream for line in log.lines] == ["stdout", "stderr", "stdout", "stdout"]
    assert await body(log, LogOptions(tail_lines=2)) == b"two\nthr"
    assert await body(log, LogOptions(tail_lines=0)) == b""
    assert await body(log, LogOptions(limit_bytes=6)) == b"one\ner"
    stamped = await body(log, LogOptions(timestamps=True, tail_lines=1))
    assert re.fullmatch(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z thr", stamped)


async def test_follow_sends_new_lines_until_the_run_ends() -> None:
    log = ContainerLog()
    log.write(1, b"a\n")
    got: list[bytes] = []
    async with trio.open_nursery() as nursery:

        async def follow() -> None:
            async for chunk in read_log(log, LogOptions(follow=True)):
                got.append(chunk)

        nursery.start_soon(follow)
        await trio.testing.wait_all_tasks_blocked()
        log.write(1, b"b\n")
        await trio.testing.wait_all_tasks_blocked()
        assert got == [b"a\n", b"b\n"]
        log.end()
    assert got == [b"a\n", b"b\n"]


def test_which_states_have_logs() -> None:
    def pod(state: dict[str, object]) -> dict[str, object]:
        status = {"containerStatuses": [{"name": "app", "state": state}]}
        return {"metadata": {"name": "p"}, "status": status}

    assert validate_log_target(pod({"running": {}}), "app", previous=False) is None
    done = {"terminated": {"exitCode": 0, "containerID": "containerd://x"}}
    assert validate_log_target(pod(done), "app", previous=False) is None
    backoff = pod({"waiting": {"reason": "ImagePullBackOff"}})
    assert validate_log_target(backoff, "app", previous=False) == (
        'container "app" in pod "p" is waiting to start: trying and failing to pull image'
    )
    assert validate_log_target(pod({"running": {}}), "app", previous=True) == (
        'previous terminated container "app" in pod "p" not found'
    )
    unknown = {"metadata": {"name": "p"}, "status": {}}
    assert validate_log_target(unknown, "app", previous=False) == (
        'container "app" in pod "p" is waiting to start - no logs yet'
    )
