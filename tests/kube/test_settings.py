"""`[kubernetes]`: every key parsed strictly into `KubeSettings`, errors naming
the key (and its line, from a file), rendered by check-config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runnerd.backends import check_config, load_config, parse_config, provider_for, render_config
from runnerd.config import ConfigError
from runnerd.kube.settings import KubeSettings

BASE = Path("/etc/runnerd")


def no_files(path: Path) -> str:
    raise FileNotFoundError(2, "No such file or directory", str(path))


def kube(**keys: Any) -> dict[str, Any]:
    return {
        "runner": {"backend": "kubernetes"},
        "kubernetes": {"self_url": "http://10.0.0.5:8063", **keys},
    }


def settings(**keys: Any) -> KubeSettings:
    return check_config(parse_config(kube(**keys), base_dir=BASE, read_text=no_files)).settings


def error_of(**keys: Any) -> str:
    with pytest.raises(ConfigError) as info:
        settings(**keys)
    return str(info.value)


def test_defaults_are_the_documented_ones() -> None:
    assert settings() == KubeSettings(self_url="http://10.0.0.5:8063")
    assert settings().bundle_listen == "tcp:0.0.0.0:8063"
    assert settings().start_deadline_s == 120.0
    assert settings().pull_backoff_grace_s == 30.0
    assert settings().on_restart == "adopt"
    assert settings(on_restart="reap").on_restart == "reap"
    assert settings().watch_adopt_grace_s == 60.0
    assert settings(watch_adopt_grace_seconds=1.5).watch_adopt_grace_s == 1.5


def test_every_key_is_read() -> None:
    got = settings(
        kubeconfig="kube/config",
        context="dev",
        namespace="sessions",
        self_url="https://runner.example:8443/",
        bundle_listen="tcp:[::]:9000",
        init_image="busybox:1.37",
        runtime_class="gvisor",
        image_pull_secret="regcred",
        managed_by="runnerd-a",
        start_deadline_seconds=30,
        pull_backoff_grace_seconds=5.5,
        attach_quiet_seconds=0,
    )
    assert got == KubeSettings(
        kubeconfig="/etc/runnerd/kube/config",
        context="dev",
        namespace="sessions",
        self_url="https://runner.example:8443",
        bundle_listen="tcp:[::]:9000",
        init_image="busybox:1.37",
        runtime_class="gvisor",
        image_pull_secret="regcred",
        managed_by="runnerd-a",
        start_deadline_s=30.0,
        pull_backoff_grace_s=5.5,
        attach_quiet_s=0.0,
    )


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"namspace": "x"}, "kubernetes.namspace: unknown key (did you mean 'namespace'?)"),
        (
            {"namespace": "Bad_NS"},
            "kubernetes.namespace: must be a namespace name (RFC 1123 label), got 'Bad_NS'",
        ),
        (
            {"self_url": "10.0.0.5:8063"},
            "kubernetes.self_url: must be an http(s) URL pods can"
            " reach (e.g. http://10.0.0.5:8063), got '10.0.0.5:8063'",
        ),
        (
            {"self_url": "http://a b:8063"},
            "kubernetes.self_url: must be an http(s) URL pods can"
            " reach (e.g. http://10.0.0.5:8063), got 'http://a b:8063'",
        ),
        (
            {"self_url": "http://10.0.0.5:80x"},
            "kubernetes.self_url: must be an http(s) URL pods"
            " can reach (e.g. http://10.0.0.5:8063), got 'http://10.0.0.5:80x'",
        ),
        (
            {"bundle_listen": "unix:/run/b.sock"},
            "kubernetes.bundle_listen: must be tcp:HOST:PORT, got 'unix:/run/b.sock'",
        ),
        (
            {"bundle_listen": "tcp:0.0.0.0"},
            "kubernetes.bundle_listen: must be unix:/path,"
            " tcp:HOST:PORT (port 0-65535), fd:N or systemd, got 'tcp:0.0.0.0'",
        ),
        ({"init_image": ""}, "kubernetes.init_image: must be a non-empty string, got ''"),
        (
            {"managed_by": "-x"},
            "kubernetes.managed_by: must be a label value (1-63 characters), got '-x'",
        ),
        (
            {"image_pull_secret": 3},
            "kubernetes.image_pull_secret: must be a non-empty string, got 3",
        ),
        (
            {"start_deadline_seconds": 0},
            "kubernetes.start_deadline_seconds: must be a positive number of seconds, got 0",
        ),
        ({"on_restart": "keep"}, "kubernetes.on_restart: must be one of adopt, reap, got 'keep'"),
        (
            {"pull_backoff_grace_seconds": "30"},
            "kubernetes.pull_backoff_grace_seconds: must be a positive number of seconds, got '30'",
        ),
        (
            {"watch_adopt_grace_seconds": 0},
            "kubernetes.watch_adopt_grace_seconds: must be a positive number of seconds, got 0",
        ),
        (
            {"attach_quiet_seconds": -1},
            "kubernetes.attach_quiet_seconds: must be a non-negative number of seconds, got -1",
        ),
    ],
)
def test_bad_values_name_their_key(keys: dict[str, Any], message: str) -> None:
    assert error_of(**keys) == message


def test_errors_from_a_file_carry_their_line(tmp_path: Path) -> None:
    path = tmp_path / "runnerd.toml"
    path.write_text(
        '[runner]\nbackend = "kubernetes"\n\n[kubernetes]\n'
        'self_url = "http://10.0.0.5:8063"\nstart_deadline_seconds = -1\n'
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        "line 6: kubernetes.start_deadline_seconds: must be a positive number of seconds, got -1"
    )


def test_check_config_renders_the_section_and_it_parses_back(tmp_path: Path) -> None:
    config = check_config(
        parse_config(kube(namespace="sessions"), base_dir=BASE, read_text=no_files)
    )
    text = render_config(config)
    assert 'namespace = "sessions"' in text and "start_deadline_seconds = 120" in text
    path = tmp_path / "again.toml"
    path.write_text(text)
    assert load_config(path).settings == config.settings


def test_reload_keeps_the_section_bound_at_start() -> None:
    old = check_config(parse_config(kube(), base_dir=BASE, read_text=no_files))
    new = check_config(parse_config(kube(namespace="other"), base_dir=BASE, read_text=no_files))
    assert provider_for(old).bound_changes(old, new) == ["kubernetes"]
    assert provider_for(old).keep_bound(old, new).settings == old.settings
