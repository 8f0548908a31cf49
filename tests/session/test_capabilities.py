"""Unit tests for runnerd.session.capabilities: the /v1/capabilities document and the
image allowlist (advertised and enforced from one place)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import runnerd.local
from runnerd.backends import parse_config
from runnerd.config import Config, images
from runnerd.config.images import Offered
from runnerd.session import capabilities

RUNTIMES = {
    "sh": {"command": ["/bin/sh", "{entry}"]},
    "python": {"command": ["python3", "-u", "{entry}"]},
    "node": {"command": ["node", "{entry}"]},
    "hello": {"command": ["/bin/sh", "-c", "echo hello"]},
    "idle": {"command": ["sleep", "infinity"]},
}


def offered(config: Config) -> Offered:
    """What the configured backend offers (the Kubernetes one: nothing)."""
    return runnerd.local.offered_images(config) if config.runner.backend == "local" else None


def allowed_images(config: Config) -> tuple[str, ...] | None:
    return images.allowed_images(config, offered(config))


def check_image(config: Config, image: str) -> str | None:
    return images.check_image(config, image, offered(config))


def build_capabilities(config: Config, notices: tuple[str, ...] = ()) -> dict[str, Any]:
    return capabilities.build_capabilities(config, offered(config), notices)


def local(runner: dict[str, Any] | None = None, **extra: Any) -> Config:
    data = {
        "runner": {"default_image": "sh", **(runner or {})},
        "local": {"runtimes": RUNTIMES},
        **extra,
    }
    return parse_config(data, base_dir=Path("/etc"), read_text=lambda p: "")


def kube(runner: dict[str, Any] | None = None) -> Config:
    """A Kubernetes-backend config (a backend with no runtime list). That
    backend is not built yet, so the parser refuses it: build it by hand."""
    base = local()
    fields: dict[str, Any] = {"default_image": "telorun/node:latest-slim", **(runner or {})}
    if "allowed_images" in fields:
        fields["allowed_images"] = tuple(fields["allowed_images"])
    return replace(base, runner=replace(base.runner, backend="kubernetes", **fields))


HELLO_APP = {
    "image": "hello",
    "title": "Hello",
    "description": "Says hello",
    "env": {"TOKEN": "tok-operator-secret"},
}


# --------------------------------------------------------------------------
# allowed_images
# --------------------------------------------------------------------------


def test_capabilities_local_default_allowlist_is_bundle_runtimes_no_app_uses() -> None:
    config = local(apps={"hello": HELLO_APP, "py": {"image": "hello"}})
    # hello/idle have no {entry}: they cannot run a bundle; default first.
    assert allowed_images(config) == ("sh", "python", "node")


def test_capabilities_local_default_comes_first() -> None:
    assert allowed_images(local({"default_image": "node"})) == ("node", "sh", "python")


def test_capabilities_operator_list_wins_with_default_first() -> None:
    config = local({"allowed_images": ["python", "sh"]})
    assert allowed_images(config) == ("sh", "python")


def test_capabilities_kubernetes_without_list_is_locked_to_default() -> None:
    assert allowed_images(kube()) is None
    assert allowed_images(kube({"allowed_images": ["telorun/node:latest-slim", "a:1"]})) == (
        "telorun/node:latest-slim",
        "a:1",
    )


# --------------------------------------------------------------------------
# check_image: always enforced
# --------------------------------------------------------------------------


def test_capabilities_check_image_accepts_allowed() -> None:
    config = local()
    for image in ("sh", "python", "node"):
        assert check_image(config, image) is None


@pytest.mark.parametrize(
    ("config", "image", "message"),
    [
        (
            local(),
            "hello",
            "image 'hello' is not allowed by this runner. Allowed images: sh, python, node",
        ),
        (
            local({"allowed_images": ["sh"]}),
            "python",
            "image 'python' is not allowed by this runner. Allowed images: sh",
        ),
        (
            kube(),
            "evil/miner:latest",
            "image 'evil/miner:latest' is not allowed by this runner. "
            "Allowed images: telorun/node:latest-slim",
        ),
        (
            kube({"allowed_images": ["telorun/node:latest-slim", "a:1"]}),
            "a:2",
            "image 'a:2' is not allowed by this runner. "
            "Allowed images: telorun/node:latest-slim, a:1",
        ),
    ],
)
def test_capabilities_check_image_rejects_naming_the_allowed(
    config: Config, image: str, message: str
) -> None:
    assert check_image(config, image) == message


def test_capabilities_kubernetes_without_list_accepts_only_the_default() -> None:
    config = kube()
    assert check_image(config, "telorun/node:latest-slim") is None
    assert check_image(config, "telorun/node:other") is not None


def test_capabilities_catalog_image_is_never_allowed_for_bundles() -> None:
    config = local(apps={"hello": HELLO_APP})
    assert check_image(config, "hello") is not None


# --------------------------------------------------------------------------
# build_capabilities
# --------------------------------------------------------------------------


def test_capabilities_document_shape() -> None:
    doc = build_capabilities(local({"display_name": "Dev", "description": "A dev runner"}))
    assert doc == {
        "displayName": "Dev",
        "description": "A dev runner",
        "features": {"io": True, "ports": True},
        "config": {
            "schema": {
                "type": "object",
                "required": ["image", "pullPolicy"],
                "additionalProperties": False,
                "properties": {
                    "image": {
                        "type": "string",
                        "title": "Image",
                        "default": "sh",
                        "enum": ["sh", "python", "node"],
                    },
                    "pullPolicy": {
                        "type": "string",
                        "title": "Pull policy",
                        "enum": ["missing", "always", "never"],
                        "default": "missing",
                    },
                    "registryUrl": {
                        "type": "string",
                        "title": "Registry URL",
                        "description": (
                            "TELO_REGISTRY_URL for the workload; blank uses the runner's."
                        ),
                    },
                },
            }
        },
    }
    assert "terms" not in doc and "apps" not in doc


def test_capabilities_schema_read_only_when_locked_to_default() -> None:
    image = build_capabilities(kube())["config"]["schema"]["properties"]["image"]
    assert image == {
        "type": "string",
        "title": "Image",
        "default": "telorun/node:latest-slim",
        "readOnly": True,
    }


def test_capabilities_schema_enum_from_operator_list() -> None:
    config = kube({"allowed_images": ["telorun/node:latest-slim", "a:1"]})
    image = build_capabilities(config)["config"]["schema"]["properties"]["image"]
    assert image["enum"] == ["telorun/node:latest-slim", "a:1"]
    assert "readOnly" not in image


def test_capabilities_terms_only_when_configured() -> None:
    doc = build_capabilities(local(terms={"body": "Be nice.", "version": "3", "title": "T"}))
    assert doc["terms"] == {"version": "3", "title": "T", "body": "Be nice."}
    assert "terms" not in build_capabilities(local(terms={"body": ""}))


def test_capabilities_apps_list_name_title_description_only() -> None:
    config = local(apps={"hello": HELLO_APP, "bare": {"image": "idle", "pull_policy": "always"}})
    doc = build_capabilities(config)
    assert doc["apps"] == [
        {"name": "hello", "title": "Hello", "description": "Says hello"},
        {"name": "bare"},
    ]


def test_capabilities_never_reveal_catalog_image_or_env() -> None:
    config = local(apps={"hello": HELLO_APP, "bare": {"image": "idle"}})
    text = json.dumps(build_capabilities(config))
    assert "tok-operator-secret" not in text
    assert "TOKEN" not in text
    assert '"idle"' not in text and '"hello"' in text  # the name, never the image
    schema_text = json.dumps(build_capabilities(config)["config"])
    assert "idle" not in schema_text and "hello" not in schema_text


def test_capabilities_document_is_json_serialisable_and_fresh() -> None:
    config = local(apps={"hello": HELLO_APP})
    one = build_capabilities(config)
    one["apps"].append({"name": "mutated"})
    assert build_capabilities(config)["apps"] == [
        {"name": "hello", "title": "Hello", "description": "Says hello"}
    ]
    json.dumps(one)


# --------------------------------------------------------------------------
# Watch sessions: `features`
# --------------------------------------------------------------------------


def watch_features(config: Config, watch_io: Any = runnerd.local.WATCH_IO) -> Any:
    return capabilities.build_capabilities(config, offered(config), (), watch_io)["features"]


AGENT_APPS = {
    "helper": {"image": "idle", "port": 7070, "token_env": "HELPER_TOKEN"},
    "hello": HELLO_APP,
    "second": {"image": "idle", "port": 7071},
}


def test_capabilities_watch_on_lists_the_backends_io_and_watch() -> None:
    config = local(watch={"enabled": True})
    assert watch_features(config) == {"io": ["tty", "streams"], "ports": True, "watch": True}


def test_capabilities_watch_on_lists_agents_with_a_port_in_catalog_order() -> None:
    config = local(watch={"enabled": True}, apps=AGENT_APPS)
    assert watch_features(config)["agents"] == ["helper", "second"]
    # An agent is named only: its image, port and token env stay the operator's.
    document = json.dumps(capabilities.build_capabilities(config, offered(config), (), ("tty",)))
    assert "HELPER_TOKEN" not in document and "7070" not in document


def test_capabilities_watch_off_keeps_the_run_session_features() -> None:
    assert watch_features(local(apps=AGENT_APPS)) == {"io": True, "ports": True}
    # A backend without watch io never advertises watch, whatever the config says.
    assert watch_features(local(watch={"enabled": True}), ()) == {"io": True, "ports": True}
