"""Unit tests for runnerd.session.admission: contract checks 2-6 in order, the
workload's env (catalog precedence and secrecy, TELO_REGISTRY_URL), limits."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import runnerd.local
from runnerd.backend import BundleSpec, ImageSpec, Limits, RunSpec, StartError
from runnerd.backends import parse_config
from runnerd.config import Config
from runnerd.contract import (
    BundleFile,
    RunBundle,
    StartAppSessionRequest,
    StartSessionRequest,
    parse_body,
)
from runnerd.session import admission
from runnerd.session.admission import AdmissionError, Catalog, admit_app, new_session_id

SID = "abcdefgh2345"
TERMS_VERSION = "v1"


def admit(
    body: StartSessionRequest, config: Config, *, accepted_terms: str | None, session_id: str
) -> RunSpec:
    """Admission with the local backend's offered images, as the daemon runs it."""
    spec = admission.admit(
        body,
        config,
        accepted_terms=accepted_terms,
        session_id=session_id,
        offered=runnerd.local.offered_images(config),
    )
    assert isinstance(spec, RunSpec)
    return spec


def make_config(*, terms: bool = False, apps: bool = True, registry: str = "") -> Config:
    data: dict[str, Any] = {
        "runner": {"default_image": "sh", "registry_url": registry},
        "limits": {
            "session": {"cpu": "50m", "memory": "100Mi", "ttl_seconds": 60},
            "app": {"cpu": "1", "memory": "1Gi", "ttl_seconds": 600},
        },
        "local": {
            "runtimes": {
                "sh": {"command": ["/bin/sh", "{entry}"]},
                "python": {"command": ["python3", "{entry}"]},
                "svc": {"command": ["/bin/sh", "-c", "exec service"]},
            }
        },
    }
    if apps:
        data["apps"] = {
            "status": {
                "image": "svc",
                "pull_policy": "always",
                "env": {"API_TOKEN": "tok-operator", "MODE": "prod"},
            },
            "plain": {"image": "svc"},
        }
    if terms:
        data["terms"] = {"body": "Be nice.", "version": TERMS_VERSION, "title": "Rules"}
    return parse_config(data, base_dir=Path("/etc"), read_text=lambda p: "")


CONFIG = make_config()


def bundle_body(**over: Any) -> StartSessionRequest:
    body: dict[str, Any] = {
        "env": {"A": "1"},
        "bundle": {
            "entryRelativePath": "/main.sh",
            "files": [{"relativePath": "main.sh", "contents": "echo hi"}],
        },
        "config": {"image": "sh", "pullPolicy": "missing"},
    }
    body.update(over)
    body = {k: v for k, v in body.items() if v is not None}
    return parse_body(StartSessionRequest, json.dumps(body).encode())


def app_body(**over: Any) -> StartSessionRequest:
    return parse_body(StartSessionRequest, json.dumps({"env": {}, **over}).encode())


def refused(
    body: StartSessionRequest, config: Config = CONFIG, accepted: str | None = None
) -> AdmissionError:
    with pytest.raises(AdmissionError) as info:
        admit(body, config, accepted_terms=accepted, session_id=SID)
    return info.value


# --------------------------------------------------------------------------
# The happy paths: what the backend gets
# --------------------------------------------------------------------------


def test_admission_bundle_session_run_spec() -> None:
    body = bundle_body(
        ports=[{"port": 3000, "protocol": "tcp"}],
        inspect=True,
        bundle={
            "entryRelativePath": "/app/./telo.yaml",
            "files": [
                {"relativePath": "app/telo.yaml", "contents": "kind: x"},
                {"relativePath": "/lib/a.yaml", "contents": "a"},
            ],
        },
        config={"image": "python", "pullPolicy": "never"},
    )
    spec = admit(body, CONFIG, accepted_terms=None, session_id=SID)
    assert spec.session_id == SID
    assert spec.app is None
    assert spec.image == ImageSpec("python", "never")
    assert spec.bundle == BundleSpec(
        entry="app/telo.yaml", files=(("app/telo.yaml", "kind: x"), ("lib/a.yaml", "a"))
    )
    assert dict(spec.env) == {"A": "1"}
    assert [(p.port, p.protocol) for p in spec.ports] == [(3000, "tcp")]
    assert spec.inspect is True
    # Anonymous sessions get the session tier.
    assert spec.limits == Limits(cpu="50m", memory="100Mi", ephemeral_storage="512Mi", ttl_s=60)


def test_admission_app_session_run_spec() -> None:
    spec = admit(app_body(app="status"), CONFIG, accepted_terms=None, session_id=SID)
    assert spec == RunSpec.create(
        session_id=SID,
        image=ImageSpec("svc", "always"),
        env={"API_TOKEN": "tok-operator", "MODE": "prod"},
        limits=Limits(cpu="1", memory="1Gi", ephemeral_storage="1Gi", ttl_s=600),
        bundle=None,
        app="status",
        ports=(),
        inspect=False,
    )


def test_admission_app_session_ignores_bundle_and_config() -> None:
    body = bundle_body(app="plain", config={"image": "not-allowed", "pullPolicy": "missing"})
    spec = admit(body, CONFIG, accepted_terms=None, session_id=SID)
    assert spec.bundle is None and spec.image == ImageSpec("svc", "missing")


def test_admission_app_session_skips_the_image_allowlist() -> None:
    # "svc" is a catalog image: never allowed for a bundle, fine for its app.
    assert refused(bundle_body(config={"image": "svc", "pullPolicy": "missing"})).code == (
        "invalid_config"
    )
    assert admit(app_body(app="plain"), CONFIG, accepted_terms=None, session_id=SID).app == "plain"


# --------------------------------------------------------------------------
# Each check, with its own answer
# --------------------------------------------------------------------------


def test_admission_terms_required_without_header() -> None:
    err = refused(bundle_body(), make_config(terms=True))
    assert (err.status, err.code) == (428, "terms_required")
    assert err.extra == {"terms": {"version": "v1", "title": "Rules", "body": "Be nice."}}
    assert "x-telo-accepted-terms: v1" in err.message
    assert err.to_body() == {
        "error": "terms_required",
        "message": err.message,
        "terms": {"version": "v1", "title": "Rules", "body": "Be nice."},
    }


def test_admission_terms_wrong_version_is_refused_right_one_admitted() -> None:
    config = make_config(terms=True)
    assert refused(bundle_body(), config, accepted="v0").status == 428
    assert refused(bundle_body(), config, accepted="").status == 428
    assert admit(bundle_body(), config, accepted_terms="v1", session_id=SID).bundle is not None


def test_admission_no_terms_ignores_the_header() -> None:
    assert admit(bundle_body(), CONFIG, accepted_terms="anything", session_id=SID)


def test_admission_unknown_app_names_the_offered_apps() -> None:
    err = refused(app_body(app="nope"))
    assert (err.status, err.code) == (400, "unknown_app")
    assert err.message == (
        "app 'nope' is not offered by this runner; offered apps: status, plain "
        "(see /v1/capabilities)"
    )


def test_admission_unknown_app_when_there_are_none() -> None:
    err = refused(app_body(app="nope"), make_config(apps=False))
    assert err.message == (
        "app 'nope' is not offered by this runner; it offers no predefined applications "
        "(see /v1/capabilities)"
    )


@pytest.mark.parametrize("missing", ["bundle", "config"])
def test_admission_bundle_and_config_required_without_app(missing: str) -> None:
    err = refused(bundle_body(**{missing: None}))
    assert (err.status, err.code) == (400, "invalid_request")
    assert err.message == (
        "'bundle' and 'config' are required unless launching a predefined app via 'app'"
    )


@pytest.mark.parametrize(
    ("entry", "files", "message"),
    [
        ("../x.sh", ["main.sh"], "bundle path '../x.sh' escapes the bundle"),
        ("main.sh", ["main.sh", "a/../../etc/passwd"], "bundle path 'a/../../etc/passwd' escapes"),
        (".", ["main.sh"], "bundle path '.' names the bundle root"),
        ("main.sh", [""], "bundle path '' is empty"),
        ("main.sh", ["main.sh", "/main.sh"], "bundle path '/main.sh' is given twice"),
        ("main.sh", ["lib", "lib/a.sh"], "bundle path 'lib/a.sh' is inside file 'lib'"),
    ],
)
def test_admission_invalid_bundle_names_the_path(
    entry: str, files: list[str], message: str
) -> None:
    # An empty relativePath is a schema error: construct these bodies directly
    # (a Struct's constructor does not validate), past the schema,
    # as admission must hold even for paths the schema would let through.
    bundle = RunBundle(
        entryRelativePath=entry,
        files=[BundleFile(relativePath=f, contents="") for f in files],
    )
    body = StartSessionRequest(env={}, bundle=bundle, config=bundle_body().config)
    err = refused(body)
    assert (err.status, err.code) == (400, "invalid_bundle")
    assert err.message.startswith(message)


def test_admission_image_not_allowed() -> None:
    err = refused(bundle_body(config={"image": "evil", "pullPolicy": "missing"}))
    assert (err.status, err.code) == (400, "invalid_config")
    assert err.message == "image 'evil' is not allowed by this runner. Allowed images: sh, python"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"A=B": "1"}, "body.env key 'A=B' is not a valid variable name"),
        ({"": "1"}, "body.env key '' is not a valid variable name"),
        ({"A": "x\0y"}, "body.env.A contains a NUL byte"),
    ],
)
def test_admission_env_execve_cannot_carry_is_invalid_request(
    env: dict[str, str], message: str
) -> None:
    err = refused(bundle_body(env=env))
    assert (err.status, err.code, err.message) == (400, "invalid_request", message)


# --------------------------------------------------------------------------
# Order: 2 terms, 3 unknown app, 4 bundle/config, 5 paths, 6 image
# --------------------------------------------------------------------------


def test_admission_order_terms_before_unknown_app() -> None:
    assert refused(app_body(app="nope"), make_config(terms=True)).code == "terms_required"


def test_admission_order_terms_before_missing_bundle() -> None:
    assert refused(bundle_body(bundle=None), make_config(terms=True)).code == "terms_required"


def test_admission_order_schema_env_before_terms() -> None:
    body = bundle_body(env={"A=B": "1"})
    assert refused(body, make_config(terms=True)).code == "invalid_request"


def test_admission_order_unknown_app_before_anything_else() -> None:
    body = bundle_body(app="nope", config={"image": "evil", "pullPolicy": "missing"})
    assert refused(body).code == "unknown_app"


def test_admission_order_bundle_paths_before_image() -> None:
    body = bundle_body(
        bundle={"entryRelativePath": "../x", "files": []},
        config={"image": "evil", "pullPolicy": "missing"},
    )
    assert refused(body).code == "invalid_bundle"


# --------------------------------------------------------------------------
# Env: catalog precedence and secrecy, TELO_REGISTRY_URL
# --------------------------------------------------------------------------


def test_admission_catalog_env_wins_over_the_client() -> None:
    body = app_body(app="status", env={"API_TOKEN": "client-forged", "MINE": "kept"})
    spec = admit(body, CONFIG, accepted_terms=None, session_id=SID)
    assert dict(spec.env) == {"MINE": "kept", "API_TOKEN": "tok-operator", "MODE": "prod"}
    assert dict(body.env) == {"API_TOKEN": "client-forged", "MINE": "kept"}  # untouched


def test_admission_catalog_env_never_in_an_error() -> None:
    config = make_config(terms=True)
    for body in (app_body(app="status"), app_body(app="nope")):
        err = refused(body, config)
        assert "tok-operator" not in json.dumps(err.to_body())


def config_with_registry(url: str) -> StartSessionRequest:
    return bundle_body(config={"image": "sh", "pullPolicy": "missing", "registryUrl": url})


@pytest.mark.parametrize(
    ("body", "runner_default", "expected"),
    [
        (config_with_registry(" https://mine "), "https://runner", "https://mine"),
        (config_with_registry("   "), "https://runner", "https://runner"),
        (config_with_registry(""), "", None),
        (bundle_body(), "https://runner", "https://runner"),
        (bundle_body(), "", None),
        (bundle_body(env={"TELO_REGISTRY_URL": "https://env"}), "https://runner", "https://env"),
        (
            bundle_body(
                env={"TELO_REGISTRY_URL": ""},
                config={"image": "sh", "pullPolicy": "missing", "registryUrl": "https://x"},
            ),
            "https://runner",
            "",
        ),
        (app_body(app="plain"), "https://runner", "https://runner"),
        (app_body(app="plain", env={"TELO_REGISTRY_URL": "https://c"}), "https://r", "https://c"),
    ],
)
def test_admission_telo_registry_url(
    body: StartSessionRequest, runner_default: str, expected: str | None
) -> None:
    spec = admit(body, make_config(registry=runner_default), accepted_terms=None, session_id=SID)
    assert spec.env.get("TELO_REGISTRY_URL") == expected


def test_admission_catalog_registry_url_beats_everything() -> None:
    config = parse_config(
        {
            "runner": {"default_image": "sh", "registry_url": "https://runner"},
            "local": {
                "runtimes": {"sh": {"command": ["sh", "{entry}"]}, "svc": {"command": ["x"]}}
            },
            "apps": {"a": {"image": "svc", "env": {"TELO_REGISTRY_URL": "https://operator"}}},
        },
        base_dir=Path("/etc"),
        read_text=lambda p: "",
    )
    body = app_body(app="a", env={"TELO_REGISTRY_URL": "https://client"})
    spec = admit(body, config, accepted_terms=None, session_id=SID)
    assert spec.env["TELO_REGISTRY_URL"] == "https://operator"


# --------------------------------------------------------------------------
# POST /v1/apps/{name}/sessions
# --------------------------------------------------------------------------


def app_route_body(raw: dict[str, Any]) -> StartAppSessionRequest:
    return parse_body(StartAppSessionRequest, json.dumps(raw).encode())


def test_admission_admit_app_unknown_is_404_before_terms() -> None:
    with pytest.raises(AdmissionError) as info:
        admit_app(
            "nope", app_route_body({}), make_config(terms=True), accepted_terms=None, session_id=SID
        )
    assert (info.value.status, info.value.code) == (404, "unknown_app")
    assert "offered apps: status, plain" in info.value.message


def test_admission_admit_app_terms_then_spec() -> None:
    config = make_config(terms=True)
    with pytest.raises(AdmissionError) as info:
        admit_app("status", app_route_body({}), config, accepted_terms=None, session_id=SID)
    assert info.value.status == 428
    body = app_route_body(
        {"env": {"API_TOKEN": "forged"}, "ports": [{"port": 80, "protocol": "tcp"}]}
    )
    spec = admit_app("status", body, config, accepted_terms="v1", session_id=SID)
    assert spec.app == "status" and spec.bundle is None
    assert spec.env["API_TOKEN"] == "tok-operator"
    assert [p.port for p in spec.ports] == [80]
    assert spec.limits.ttl_s == 600


def test_admission_admit_app_env_optional() -> None:
    spec = admit_app("plain", app_route_body({}), CONFIG, accepted_terms=None, session_id=SID)
    assert dict(spec.env) == {}


# --------------------------------------------------------------------------
# Session ids
# --------------------------------------------------------------------------


def test_admission_session_ids_are_12_base32_chars_and_distinct() -> None:
    ids = {new_session_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(re.fullmatch(r"[a-z2-7]{12}", i) for i in ids)
    # Every alphabet letter shows up: the ids really span a-z2-7.
    assert set("".join(ids)) == set("abcdefghijklmnopqrstuvwxyz234567")


ENV_NAMES = ["A", "_x1", "PATH", "1X", "MY-VAR", "a.b", "A B", "É", "A=B", ""]


@pytest.mark.parametrize("name", ENV_NAMES)
def test_admission_accepts_exactly_the_env_names_config_and_backend_accept(name: str) -> None:
    """One env-name rule: admission never admits a name the local backend
    would refuse at start, nor one an operator could not write in the catalog."""
    from runnerd.config import ConfigError
    from runnerd.local.launch import build_env

    try:
        admit(bundle_body(env={name: "v"}), CONFIG, accepted_terms=None, session_id=SID)
        admitted = True
    except AdmissionError as err:
        assert err.code == "invalid_request" and repr(name) in err.message
        admitted = False
    try:
        build_env({name: "v"}, home=Path("/tmp"))
        runnable = True
    except ValueError:
        runnable = False
    data: dict[str, Any] = {
        "runner": {"default_image": "sh"},
        "local": {"runtimes": {"sh": {"command": ["/bin/sh", "{entry}"]}, "h": {"command": ["x"]}}},
        "apps": {"a": {"image": "h", "env": {name: "v"}}},
    }
    try:
        parse_config(data, base_dir=Path("/etc"), read_text=lambda p: "")
        configurable = True
    except ConfigError:
        configurable = False
    assert admitted == runnable == configurable
    assert admitted == (name in ("A", "_x1", "PATH"))


def _app_run_spec(app: str | None) -> RunSpec:
    limits = Limits(cpu="1", memory="1Gi", ephemeral_storage="1Gi", ttl_s=60)
    return RunSpec.create(
        session_id=new_session_id(),
        image=ImageSpec("hello", "missing"),
        env={},
        limits=limits,
        app=app,
    )


def test_admission_catalog_recheck_refuses_an_app_withdrawn_since_admission() -> None:
    catalog = Catalog(["hello"])
    catalog.recheck(_app_run_spec("hello"))
    catalog.recheck(_app_run_spec(None))  # a bundle session names no app
    catalog.offer(["other"])
    with pytest.raises(StartError) as refused:
        catalog.recheck(_app_run_spec("hello"))
    assert (refused.value.stage, refused.value.message) == (
        "provision",
        "app 'hello' is no longer offered by this runner",
    )


def test_admission_catalog_recheck_never_refuses_an_adopted_workload() -> None:
    # It exists already (a previous daemon started it): refusing it would
    # leave it running with nobody supervising it.
    adopted = RunSpec(_app_run_spec("hello").identity, None)
    Catalog([]).recheck(adopted)
