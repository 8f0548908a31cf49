"""ConfigMaps over the wire: CRUD, list/watch, the real 4xx bodies, tables, discovery, GC."""

from __future__ import annotations

import base64
import json

import httpx
import trio

from tests.kubesim.conftest import PODS, build_pod

CMS = "/api/v1/namespaces/runnerd/configmaps"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def build_cm(name: str, data: dict[str, str] | None = None, **extra: object) -> dict[str, object]:
    return {"metadata": {"name": name}, "data": data or {"a": "1"}, **extra}


async def test_create_get_list_delete(kube: httpx.AsyncClient) -> None:
    r = await kube.post(CMS, json=build_cm("app", {"k": "v"}, binaryData={"b": "AAE="}))
    assert r.status_code == 201
    cm = r.json()
    assert list(cm) == ["kind", "apiVersion", "metadata", "data", "binaryData"]
    assert cm["metadata"]["namespace"] == "runnerd" and len(cm["metadata"]["uid"]) == 36
    assert (await kube.get(f"{CMS}/app")).json() == cm
    listing = (await kube.get(CMS)).json()
    assert listing["kind"] == "ConfigMapList" and [i["metadata"]["name"] for i in listing["items"]]
    assert listing["items"][0]["data"] == {"k": "v"}
    deleted = await kube.delete(f"{CMS}/app")
    assert deleted.status_code == 200 and deleted.json()["metadata"]["name"] == "app"
    gone = await kube.get(f"{CMS}/app")
    assert gone.status_code == 404 and gone.json()["message"] == 'configmaps "app" not found'
    assert gone.json()["details"] == {"name": "app", "kind": "configmaps"}


async def test_already_exists_and_missing_namespace(kube: httpx.AsyncClient) -> None:
    await kube.post(CMS, json=build_cm("app"))
    r = await kube.post(CMS, json=build_cm("app", {"other": "x"}))
    assert r.status_code == 409 and r.json()["reason"] == "AlreadyExists"
    assert r.json()["message"] == 'configmaps "app" already exists'
    assert (await kube.get(f"{CMS}/app")).json()["data"] == {"a": "1"}  # unchanged
    r = await kube.post("/api/v1/namespaces/nope/configmaps", json=build_cm("app"))
    assert r.status_code == 404 and r.json()["message"] == 'namespaces "nope" not found'


async def test_invalid_name_and_keys_are_the_real_422(kube: httpx.AsyncClient) -> None:
    r = await kube.post(CMS, json=build_cm("Bad_Name"))
    assert r.status_code == 422
    assert r.json()["message"].startswith(
        'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase '
        "RFC 1123 subdomain"
    )
    r = await kube.post(CMS, json=build_cm("cm", {"a b": "1", "..x": "2"}))
    body = r.json()
    assert r.status_code == 422 and body["details"]["kind"] == "ConfigMap"
    causes = {(c["field"], c["message"]) for c in body["details"]["causes"]}
    assert (
        "data[a b]",
        'Invalid value: "a b": a valid config key must consist of alphanumeric characters, '
        "'-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for "
        "validation is '[-._a-zA-Z0-9]+')",
    ) in causes
    assert ("data[..x]", "Invalid value: \"..x\": must not start with '..'") in causes
    r = await kube.post(CMS, json=build_cm("cm", {"k": "1"}, binaryData={"k": "AA=="}))
    assert r.json()["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "k": duplicate of key present in binaryData',
            "field": "data[k]",
        }
    ]
    assert (await kube.get(CMS)).json()["items"] == []  # nothing stored


async def test_one_mebibyte_limit(kube: httpx.AsyncClient) -> None:
    half = "x" * (512 * 1024)
    ok = await kube.post(CMS, json=build_cm("fits", {"a": half, "b": half}))
    assert ok.status_code == 201
    r = await kube.post(CMS, json=build_cm("big", {"a": half, "b": half + "x"}))
    assert r.status_code == 422
    assert r.json()["message"] == (
        'ConfigMap "big" is invalid: []: Too long: may not be more than 1048576 bytes'
    )
    assert r.json()["details"]["causes"][0]["reason"] == "FieldValueTooLong"


async def test_wrong_value_types_are_the_decoders_400(kube: httpx.AsyncClient) -> None:
    r = await kube.post(CMS, json={"metadata": {"name": "cm"}, "data": {"n": 1}})
    assert r.status_code == 400 and r.json()["message"] == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal '
        "number into Go struct field ConfigMap.data of type string"
    )
    r = await kube.post(CMS, json={"metadata": {"name": "cm"}, "binaryData": {"b": "!!"}})
    assert r.status_code == 400 and "illegal base64 data at input byte 0" in r.json()["message"]


async def test_update_patch_and_immutable(kube: httpx.AsyncClient) -> None:
    created = (await kube.post(CMS, json=build_cm("cm"))).json()
    patch = {"data": {"b": "2"}}
    r = await kube.patch(
        f"{CMS}/cm",
        content=json.dumps(patch),
        headers={"content-type": "application/merge-patch+json"},
    )
    assert r.status_code == 200 and r.json()["data"] == {"a": "1", "b": "2"}
    stale = {**created, "data": {"c": "3"}}
    assert (await kube.put(f"{CMS}/cm", json=stale)).status_code == 409
    frozen = (await kube.post(CMS, json=build_cm("frozen", immutable=True))).json()
    assert list(frozen)[:5] == ["kind", "apiVersion", "metadata", "immutable", "data"]
    r = await kube.put(f"{CMS}/frozen", json={**frozen, "data": {"a": "2"}})
    assert r.status_code == 422 and r.json()["message"] == (
        'ConfigMap "frozen" is invalid: data: Forbidden: field is immutable when `immutable` is set'
    )
    assert (await kube.get(f"{CMS}/frozen")).json()["data"] == {"a": "1"}


async def test_label_selectors_and_watch(kube: httpx.AsyncClient) -> None:
    await kube.post(CMS, json={"metadata": {"name": "x", "labels": {"role": "app"}}})
    await kube.post(CMS, json={"metadata": {"name": "y", "labels": {"role": "other"}}})
    picked = (await kube.get(CMS, params={"labelSelector": "role=app"})).json()
    assert [i["metadata"]["name"] for i in picked["items"]] == ["x"]
    rv = picked["metadata"]["resourceVersion"]
    seen: list[tuple[str, str]] = []
    with trio.fail_after(10):
        params = {"watch": "1", "resourceVersion": rv, "labelSelector": "role=app"}
        async with kube.stream("GET", CMS, params=params) as resp:
            await kube.post(CMS, json={"metadata": {"name": "z", "labels": {"role": "app"}}})
            await kube.delete(f"{CMS}/x")
            async for line in resp.aiter_lines():
                ev = json.loads(line)
                seen.append((ev["type"], ev["object"]["metadata"]["name"]))
                if len(seen) == 2:
                    break
    assert seen == [("ADDED", "z"), ("DELETED", "x")]


async def test_table_and_discovery(kube: httpx.AsyncClient) -> None:
    binary = base64.b64encode(b"\x00").decode()
    await kube.post(CMS, json=build_cm("cm", {"a": "1", "b": "2"}, binaryData={"c": binary}))
    doc = (await kube.get(CMS, headers={"accept": TABLE})).json()
    assert [c["name"] for c in doc["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert doc["rows"][0]["cells"][:2] == ["cm", 3]
    resources = (await kube.get("/api/v1")).json()["resources"]
    entry = next(r for r in resources if r["name"] == "configmaps")
    assert entry["shortNames"] == ["cm"] and entry["kind"] == "ConfigMap"
    assert "watch" in entry["verbs"] and "patch" in entry["verbs"]


async def test_deleting_the_owner_collects_its_configmaps(kube: httpx.AsyncClient) -> None:
    uid = (await kube.post(PODS, json=build_pod("owner"))).json()["metadata"]["uid"]
    ref = {"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": uid}
    await kube.post(CMS, json={"metadata": {"name": "owned", "ownerReferences": [ref]}})
    await kube.post(CMS, json={"metadata": {"name": "free"}})
    assert (await kube.delete(f"{PODS}/owner")).status_code == 200
    assert [i["metadata"]["name"] for i in (await kube.get(CMS)).json()["items"]] == ["free"]
