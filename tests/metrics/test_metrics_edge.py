"""The metrics listener's edge, hit as a DNS-rebinding page or an operator
binding it to the network would: same Host/Origin rules as the API."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from tests.harness import build_config, dump_toml, run_runnerd, start_daemon

EVIL = "http://evil.example"


async def test_a_rebinding_page_cannot_read_metrics_over_tcp(tmp_path: Path) -> None:
    config = {"metrics": {"listen": ["tcp:127.0.0.1:0"]}}
    async with start_daemon(tmp_path, config) as daemon:
        match = re.search(r"metrics=tcp:127\.0\.0\.1:(\d+)", daemon.stderr_text())
        assert match, daemon.stderr_text()
        port = int(match.group(1))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            rebound = await client.get(
                "/metrics", headers={"host": f"evil.example:{port}", "origin": EVIL}
            )
            page = await client.get("/metrics", headers={"origin": EVIL})
            scraper = await client.get("/metrics")
    assert rebound.status_code == 403, rebound.text
    assert rebound.json()["error"] == "forbidden_host"
    assert "evil.example" in rebound.json()["message"]
    assert page.status_code == 403 and page.json()["error"] == "forbidden_origin"
    assert "runnerd_" not in rebound.text + page.text
    assert scraper.status_code == 200 and "runnerd_sessions" in scraper.text


async def test_check_config_refuses_a_remote_metrics_bind_unless_allowed(tmp_path: Path) -> None:
    path = tmp_path / "runnerd.toml"
    remote = {"metrics": {"listen": "tcp:0.0.0.0:19997"}}
    path.write_text(dump_toml(build_config(tmp_path, tmp_path / "runnerd.sock", remote)))
    refused = await run_runnerd("check-config", "--config", str(path))
    stderr = refused.stderr.decode()
    assert refused.returncode == 2, stderr
    assert "metrics.listen: " in stderr and "allow_remote = true" in stderr
    allowed = {**remote, "server": {"allow_remote": True}}
    path.write_text(dump_toml(build_config(tmp_path, tmp_path / "runnerd.sock", allowed)))
    accepted = await run_runnerd("check-config", "--config", str(path))
    assert accepted.returncode == 0, accepted.stderr.decode()
    assert json.dumps("tcp:0.0.0.0:19997")[1:-1] in accepted.stdout.decode()
