"""`GET /metrics` on its own listener, scraped with the Prometheus text parser."""

from __future__ import annotations

import contextlib
from pathlib import Path

import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

from tests.cli.helpers import start, wait_status
from tests.harness import Daemon, iter_sse, open_ws, read_pty_until, run_runnerd, start_daemon

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def overrides(base: Path, **more: object) -> dict[str, object]:
    return {
        "metrics": {"listen": [f"unix:{base / 'metrics.sock'}"]},
        "local": {"runtimes": {"broken": {"command": ["/nonexistent/tool", "{entry}"]}}},
        **more,
    }


async def scrape(daemon: Daemon, base: Path) -> Samples:
    transport = httpx.AsyncHTTPTransport(uds=str(base / "metrics.sock"))
    async with httpx.AsyncClient(transport=transport, base_url="http://metrics") as client:
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_a_scrape_after_a_few_sessions_counts_them(tmp_path: Path) -> None:
    async with start_daemon(tmp_path, overrides(tmp_path)) as daemon:
        ok = await start(daemon, "echo one; exit 0")
        code3 = await start(daemon, "echo three; exit 3")
        broken = await start(daemon, "echo never", image="broken")
        live = await start(daemon, "echo live; exec sleep 30")
        for session_id, kind in ((ok, "exited"), (code3, "exited"), (broken, "failed")):
            await wait_status(daemon, session_id, (kind,))
        await read_pty_until(daemon.socket_path, live, rb"live")
        async with daemon.client() as client:
            message = (await client.get(f"/v1/sessions/{broken}")).json()["status"]["message"]
            await client.get("/v1/sessions/nosuchsession")

            samples = await scrape(daemon, tmp_path)
            assert value(samples, "runnerd_sessions", status="exited") == 2
            assert value(samples, "runnerd_sessions", status="failed") == 1
            assert value(samples, "runnerd_sessions", status="running") == 1
            assert value(samples, "runnerd_sessions", status="stopped") == 0
            starts = "runnerd_session_starts_total"
            assert value(samples, starts, backend="local", outcome="running") == 3
            assert value(samples, starts, backend="local", outcome="failed") == 1
            stage = message.split(":")[0]
            assert value(samples, "runnerd_session_start_failures_total", stage=stage) == 1
            assert value(samples, "runnerd_session_start_seconds_count", backend="local") == 3
            assert value(samples, "runnerd_pty_bytes_total", direction="output") >= len(
                "one\r\nthree\r\nlive\r\n"
            )
            requests = "runnerd_http_requests_total"
            posts = value(samples, requests, route="/v1/sessions", method="POST", status="201")
            assert posts == 4
            route = "/v1/sessions/<session_id>"
            assert value(samples, requests, route=route, method="GET", status="404") == 1
            assert value(samples, "process_resident_memory_bytes") > 0

            await client.delete(f"/v1/sessions/{live}")
        samples = await scrape(daemon, tmp_path)
        assert value(samples, "runnerd_sessions", status="stopped") == 1
        assert value(samples, "runnerd_sessions", status="running") == 0


async def test_a_local_daemon_exports_no_kube_series_and_no_created_series(
    tmp_path: Path,
) -> None:
    async with start_daemon(tmp_path, overrides(tmp_path)) as daemon:
        session_id = await start(daemon, "echo one; exit 0")
        await wait_status(daemon, session_id, ("exited",))
        samples = await scrape(daemon, tmp_path)
    names = {name for name, _ in samples}
    assert value(samples, "runnerd_session_starts_total", backend="local", outcome="running") == 1
    assert not {n for n in names if n.startswith("runnerd_kube_")}, sorted(names)
    assert not {n for n in names if n.endswith("_created")}, sorted(names)


async def test_live_subscribers_and_replay_gaps_are_counted(tmp_path: Path) -> None:
    config = overrides(tmp_path, runner={"default_image": "sh", "replay_buffer_bytes": 256})
    async with start_daemon(tmp_path, config) as daemon:
        # Two bursts, the second only after input: at least two chunks, and the
        # first is evicted from the 256-byte ring by the second. Each burst is
        # ONE write (its line end included): two writes could reach the ring as
        # two chunks, the second evicting the first before the first reader
        # connects, which would count a gap of its own (seen under load).
        burst = "printf '%s{}\\n' \"$(printf '{}%.0s' $(seq 300))\""
        script = f"{burst.format('', 'a')}; read x; {burst.format('END', 'b')}; read y"
        session_id = await start(daemon, script)
        await read_pty_until(daemon.socket_path, session_id, rb"a{300}")
        async with open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io") as first:
            await first.send_message(b"next\n")
            output = b""
            with trio.fail_after(10):
                while b"END" not in output:
                    message = await first.get_message()
                    output += message[4:] if isinstance(message, bytes) else b""
        async with (
            daemon.client() as client,
            client.stream("GET", f"/v1/sessions/{session_id}/events") as events,
            contextlib.aclosing(iter_sse(events)) as frames,
            open_ws(daemon.socket_path, f"/v1/sessions/{session_id}/io?lastSeq=0") as ws,
        ):
            with trio.fail_after(10):
                while (await ws.get_message()) != '{"type":"gap","reason":"buffer_evicted"}':
                    pass
                await anext(frames)  # the stream is being served once a frame arrives
            samples = await scrape(daemon, tmp_path)
            assert value(samples, "runnerd_stream_subscribers", channel="websocket") == 1
            assert value(samples, "runnerd_stream_subscribers", channel="sse") == 1
            assert value(samples, "runnerd_replay_gaps_total", channel="websocket") == 1
            await ws.send_message(b"done\n")
        await wait_status(daemon, session_id, ("exited",))
        # The server notices each reader's end on its own time: wait for it.
        with trio.fail_after(10):
            while True:
                samples = await scrape(daemon, tmp_path)
                readers = [
                    value(samples, "runnerd_stream_subscribers", channel=channel)
                    for channel in ("websocket", "sse")
                ]
                if readers == [0, 0]:
                    break
                await trio.sleep(0.05)


async def test_metrics_are_off_by_default_and_never_on_the_api(runnerd: Daemon) -> None:
    async with runnerd.client() as client:
        assert (await client.get("/metrics")).status_code == 404
    assert "metrics=" not in runnerd.stderr_text()


async def test_metrics_refuse_an_api_listener_and_systemd(tmp_path: Path) -> None:
    api = f"unix:{tmp_path / 'api.sock'}"
    config = tmp_path / "runnerd.toml"
    config.write_text(
        f'[server]\nlisten = ["{api}"]\n[metrics]\nlisten = "{api}"\n'
        '[runner]\ndefault_image = "sh"\n[local.runtimes.sh]\ncommand = ["/bin/sh", "{entry}"]\n'
    )
    result = await run_runnerd("check-config", "--config", str(config))
    assert result.returncode == 2
    assert b"metrics.listen: " in result.stderr and b"server.listen entry" in result.stderr
    config.write_text(config.read_text().replace(f'listen = "{api}"', 'listen = ["systemd"]'))
    result = await run_runnerd("check-config", "--config", str(config))
    assert result.returncode == 2 and b"metrics.listen[0]: " in result.stderr
