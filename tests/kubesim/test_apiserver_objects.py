"""The apiserver's object semantics and error bodies, checked byte for byte where it matters."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import trio

from tests.kubesim.conftest import PODS, build_client, build_pod
from tests.kubesim.server import KubeSim, open_kubesim


async def test_starts_in_under_a_second(tmp_path: Path) -> None:
    started = time.monotonic()
    async with open_kubesim(tmp_path) as sim:  # the whole cluster, kubelet included
        elapsed = time.monotonic() - started
        async with build_client(sim) as kube:
            assert (await kube.get("/version")).json()["gitVersion"].startswith("v1.37")
    assert elapsed < 1.0


async def test_create_sets_server_fields_and_defaults(kube: httpx.AsyncClient) -> None:
    r = await kube.post(PODS, json=build_pod("web"))
    assert r.status_code == 201
    pod = r.json()
    assert list(pod)[:5] == ["kind", "apiVersion", "metadata", "spec", "status"]
    meta = pod["metadata"]
    assert meta["namespace"] == "runnerd" and len(meta["uid"]) == 36
    assert meta["creationTimestamp"].endswith("Z")
    assert pod["spec"]["restartPolicy"] == "Always"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 30
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert pod["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert (await kube.get(f"{PODS}/web")).json() == pod
    assert (await kube.get(f"{PODS}/web/status")).json() == pod


async def test_resource_versions_come_from_one_counter(kube: httpx.AsyncClient) -> None:
    a = (await kube.post(PODS, json=build_pod("a"))).json()
    svc = {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}
    s = (await kube.post("/api/v1/namespaces/runnerd/services", json=svc)).json()
    b = (await kube.post(PODS, json=build_pod("b"))).json()
    rvs = [int(o["metadata"]["resourceVersion"]) for o in (a, s, b)]
    assert rvs == [rvs[0], rvs[0] + 1, rvs[0] + 2]
    listing = (await kube.get(PODS)).json()
    assert listing["kind"] == "PodList" and listing["metadata"]["resourceVersion"] == str(rvs[2])
    assert [p["metadata"]["name"] for p in listing["items"]] == ["a", "b"]
    assert "kind" not in listing["items"][0]  # typed list items carry no kind


async def test_generate_name(kube: httpx.AsyncClient) -> None:
    pod = build_pod("")
    pod["metadata"] = {"generateName": "sess-"}
    name = (await kube.post(PODS, json=pod)).json()["metadata"]["name"]
    assert name.startswith("sess-") and len(name) == 10


async def test_invalid_pod_is_the_real_422(kube: httpx.AsyncClient) -> None:
    pod = build_pod("Bad_Name", labels={"ok": "bad value!"})
    pod["spec"]["containers"] = [{"name": "app"}]
    r = await kube.post(PODS, json=pod)
    assert r.status_code == 422
    body = r.json()
    assert body["reason"] == "Invalid" and body["details"]["kind"] == "Pod"
    assert body["message"].startswith('Pod "Bad_Name" is invalid: [metadata.name: Invalid value: ')
    fields = [(c["reason"], c["field"]) for c in body["details"]["causes"]]
    assert fields == [
        ("FieldValueInvalid", "metadata.name"),
        ("FieldValueInvalid", "metadata.labels"),
        ("FieldValueRequired", "spec.containers[0].image"),
    ]
    assert (await kube.get(PODS)).json()["items"] == []  # rejected: no state change


async def test_single_error_message_has_no_brackets(kube: httpx.AsyncClient) -> None:
    pod = build_pod("ok")
    pod["spec"]["containers"] = []
    r = await kube.post(PODS, json=pod)
    assert r.text == (
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        '"message":"Pod \\"ok\\" is invalid: spec.containers: Required value",'
        '"reason":"Invalid","details":{"name":"ok","kind":"Pod","causes":[{"reason":'
        '"FieldValueRequired","message":"Required value","field":"spec.containers"}]},'
        '"code":422}\n'
    )


async def test_not_found_and_already_exist_bodies(kube: httpx.AsyncClient) -> None:
    r = await kube.get(f"{PODS}/x")
    assert (r.status_code, r.headers["content-type"]) == (404, "application/json")
    assert r.text == (
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":'
        '"pods \\"x\\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},'
        '"code":404}\n'
    )
    await kube.post(PODS, json=build_pod("x"))
    r = await kube.post(PODS, json=build_pod("x"))
    assert r.status_code == 409
    assert r.json()["message"] == 'pods "x" already exists'
    assert r.json()["details"] == {"name": "x", "kind": "pods"}
    r = await kube.get("/apis/networking.k8s.io/v1/namespaces/runnerd/ingresses/nope")
    assert r.json()["message"] == 'ingresses.networking.k8s.io "nope" not found'
    assert r.json()["details"] == {
        "name": "nope",
        "group": "networking.k8s.io",
        "kind": "ingresses",
    }


async def test_create_in_missing_namespace(kube: httpx.AsyncClient) -> None:
    r = await kube.post("/api/v1/namespaces/ghost/pods", json=build_pod("a"))
    assert r.status_code == 404 and r.json()["message"] == 'namespaces "ghost" not found'


async def test_unauthenticated_is_the_real_401(apiserver: KubeSim) -> None:
    for token in ("", "wrong"):
        async with build_client(apiserver, token=token) as anon:
            r = await anon.get(PODS)
        assert r.status_code == 401
        assert r.text == (
            '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
            '"message":"Unauthorized","reason":"Unauthorized","code":401}\n'
        )


async def test_client_certificate_authenticates(apiserver: KubeSim) -> None:
    ctx = apiserver.client_ssl_context(client_cert=True)
    async with httpx.AsyncClient(base_url=apiserver.url, verify=ctx) as kube:
        assert (await kube.get(PODS)).status_code == 200
    apiserver.faults.deny("list", "pods")
    async with httpx.AsyncClient(base_url=apiserver.url, verify=ctx) as kube:
        user = "system:serviceaccount:runnerd:runnerd"
        assert f'User \\"{user}\\"' in (await kube.get(PODS)).text


async def test_unknown_paths_are_real_404s(kube: httpx.AsyncClient) -> None:
    for path in ("/apis/apps/v1", "/api/v1/namespaces/runnerd/secrets", "/nope", "/openapi/v2"):
        r = await kube.get(path)
        assert r.status_code == 404, path
        assert r.json() == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "the server could not find the requested resource",
            "reason": "NotFound",
            "details": {},
            "code": 404,
        }


async def test_discovery(kube: httpx.AsyncClient) -> None:
    core = (await kube.get("/api/v1")).json()
    pods = next(r for r in core["resources"] if r["name"] == "pods")
    assert pods["shortNames"] == ["po"] and pods["namespaced"] and "watch" in pods["verbs"]
    names = {r["name"] for r in core["resources"]}
    assert {"pods/attach", "pods/exec", "pods/status", "services", "namespaces"} <= names
    groups = (await kube.get("/apis")).json()
    assert [g["name"] for g in groups["groups"]] == [
        "events.k8s.io",
        "networking.k8s.io",
        "gateway.networking.k8s.io",
    ]
    net = (await kube.get("/apis/networking.k8s.io/v1")).json()
    assert [r["name"] for r in net["resources"]] == [
        "ingressclasses",
        "ingresses",
        "ingresses/status",
    ]
    assert (await kube.get("/api")).json()["versions"] == ["v1"]
    aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    r = await kube.get("/api", headers={"Accept": f"{aggregated},application/json"})
    assert r.headers["content-type"] == aggregated
    [core_group] = r.json()["items"]
    resources = {res["resource"]: res for res in core_group["versions"][0]["resources"]}
    assert resources["pods"]["scope"] == "Namespaced"
    assert {s["subresource"] for s in resources["pods"]["subresources"]} == {
        "attach",
        "exec",
        "log",
        "status",
    }
    r = await kube.get("/apis", headers={"Accept": aggregated})
    assert r.json()["items"][1]["metadata"] == {"name": "networking.k8s.io"}
    for probe in ("/healthz", "/livez", "/readyz"):
        r = await kube.get(probe)
        assert (r.status_code, r.text) == (200, "ok")


async def test_namespaces(kube: httpx.AsyncClient) -> None:
    listing = (await kube.get("/api/v1/namespaces")).json()
    assert {n["metadata"]["name"] for n in listing["items"]} >= {"default", "runnerd"}
    ns = (await kube.get("/api/v1/namespaces/runnerd")).json()
    assert ns["status"] == {"phase": "Active"}


async def test_rbac_denial_names_the_service_account(
    apiserver: KubeSim, kube: httpx.AsyncClient
) -> None:
    apiserver.faults.deny("create", "pods")
    apiserver.faults.deny("get", "pods")
    r = await kube.post(PODS, json=build_pod("a"))
    assert r.text == (
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":'
        '"pods is forbidden: User \\"system:serviceaccount:runnerd:runnerd\\" cannot create '
        'resource \\"pods\\" in API group \\"\\" in the namespace \\"runnerd\\"",'
        '"reason":"Forbidden","details":{"kind":"pods"},"code":403}\n'
    )
    r = await kube.get(f"{PODS}/foo")
    assert r.json()["message"].startswith('pods "foo" is forbidden: User ')
    assert r.json()["details"] == {"name": "foo", "kind": "pods"}
    apiserver.faults.allow("create", "pods")
    assert (await kube.post(PODS, json=build_pod("a"))).status_code == 201


async def test_quota_is_enforced_at_pod_create(apiserver: KubeSim, kube: httpx.AsyncClient) -> None:
    await apiserver.faults.set_quota("runnerd", "compute", {"pods": "2", "limits.cpu": "4"})

    def limited(name: str, cpu: str) -> dict[str, object]:
        pod = build_pod(name)
        pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": cpu, "memory": "64Mi"}}
        return pod

    assert (await kube.post(PODS, json=limited("a", "3"))).status_code == 201
    r = await kube.post(PODS, json=limited("sess-abc", "2"))
    assert r.status_code == 403
    assert r.text == (
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":'
        '"pods \\"sess-abc\\" is forbidden: exceeded quota: compute, requested: limits.cpu=2, '
        'used: limits.cpu=3, limited: limits.cpu=4","reason":"Forbidden","details":'
        '{"name":"sess-abc","kind":"pods"},"code":403}\n'
    )
    r = await kube.post(PODS, json=build_pod("nolimits"))
    assert r.json()["message"] == (
        'pods "nolimits" is forbidden: failed quota: compute: must specify limits.cpu for: app'
    )
    assert (await kube.post(PODS, json=limited("b", "500m"))).status_code == 201
    r = await kube.post(PODS, json=limited("c", "100m"))
    assert "exceeded quota: compute, requested: pods=1, used: pods=2, limited: pods=2" in r.text
    q = (await kube.get("/api/v1/namespaces/runnerd/resourcequotas/compute")).json()
    assert q["status"]["used"] == {"pods": "2", "limits.cpu": "3500m"}


async def test_quota_created_over_http_applies(kube: httpx.AsyncClient) -> None:
    quota = {"metadata": {"name": "count"}, "spec": {"hard": {"pods": "0"}}}
    assert (await kube.post("/api/v1/namespaces/runnerd/resourcequotas", json=quota)).is_success
    r = await kube.post(PODS, json=build_pod("a"))
    assert r.status_code == 403 and "exceeded quota: count" in r.json()["message"]


async def test_services_and_ingresses_roundtrip(kube: httpx.AsyncClient) -> None:
    svcs = "/api/v1/namespaces/runnerd/services"
    ings = "/apis/networking.k8s.io/v1/namespaces/runnerd/ingresses"
    bad = await kube.post(svcs, json={"metadata": {"name": "1svc"}, "spec": {}})
    assert [c["field"] for c in bad.json()["details"]["causes"]] == ["metadata.name", "spec.ports"]
    svc = await kube.post(svcs, json={"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
    assert svc.json()["spec"]["ports"][0] == {"port": 80, "protocol": "TCP", "targetPort": 80}
    ing = {"metadata": {"name": "i"}, "spec": {"defaultBackend": {"service": {"name": "s"}}}}
    created = (await kube.post(ings, json=ing)).json()
    assert created["kind"] == "Ingress" and created["apiVersion"] == "networking.k8s.io/v1"
    assert [i["metadata"]["name"] for i in (await kube.get(ings)).json()["items"]] == ["i"]
    assert (await kube.delete(f"{ings}/i")).status_code == 200
    assert (await kube.delete(f"{svcs}/s")).status_code == 200
    assert (await kube.get(f"{svcs}/s")).status_code == 404


async def test_deleting_an_owner_collects_its_dependents(kube: httpx.AsyncClient) -> None:
    svcs = "/api/v1/namespaces/runnerd/services"
    ings = "/apis/networking.k8s.io/v1/namespaces/runnerd/ingresses"
    uid = (await kube.post(PODS, json=build_pod("owner"))).json()["metadata"]["uid"]
    ref = {"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": uid, "controller": True}
    for name, refs in (("owned", [ref]), ("free", [])):
        meta = {"name": name, "ownerReferences": refs}
        await kube.post(svcs, json={"metadata": meta, "spec": {"ports": [{"port": 80}]}})
    ing = {"metadata": {"name": "owned", "ownerReferences": [ref]}, "spec": {"rules": [{}]}}
    await kube.post(ings, json=ing)
    r = await kube.delete(f"{PODS}/owner", params={"propagationPolicy": "Background"})
    assert r.status_code == 200 and r.json()["metadata"]["deletionTimestamp"]
    assert [s["metadata"]["name"] for s in (await kube.get(svcs)).json()["items"]] == ["free"]
    assert (await kube.get(ings)).json()["items"] == []


async def test_orphan_policy_keeps_dependents(kube: httpx.AsyncClient) -> None:
    svcs = "/api/v1/namespaces/runnerd/services"
    uid = (await kube.post(PODS, json=build_pod("owner"))).json()["metadata"]["uid"]
    meta = {"name": "s", "ownerReferences": [{"kind": "Pod", "name": "owner", "uid": uid}]}
    await kube.post(svcs, json={"metadata": meta, "spec": {"ports": [{"port": 80}]}})
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"}
    r = await kube.request("DELETE", f"{PODS}/owner", json=body)
    assert r.status_code == 200
    kept = (await kube.get(f"{svcs}/s")).json()
    assert "ownerReferences" not in kept["metadata"]


async def test_delete_rejects_unknown_policy_and_missing_pod(kube: httpx.AsyncClient) -> None:
    await kube.post(PODS, json=build_pod("a"))
    r = await kube.delete(f"{PODS}/a", params={"propagationPolicy": "Sometimes"})
    assert r.status_code == 422 and "propagationPolicy: Unsupported value" in r.json()["message"]
    assert (await kube.get(f"{PODS}/a")).status_code == 200
    assert (await kube.delete(f"{PODS}/zzz")).json()["message"] == 'pods "zzz" not found'


async def test_graceful_delete_waits_for_a_kubelet(apiserver: KubeSim) -> None:
    store = apiserver.store
    await store.create("pods", "runnerd", build_pod("p"))
    await store.update("pods", "runnerd", "p", lambda p: p["spec"].update(nodeName="node-1"))
    with store.kubelet_registered():
        shown = await store.delete("pods", "runnerd", "p", grace_period_s=5)
        assert shown["metadata"]["deletionGracePeriodSeconds"] == 5
        assert store.get("pods", "runnerd", "p") is not None  # kubelet's job to remove
        again = await store.delete("pods", "runnerd", "p", grace_period_s=10)
        assert again["metadata"]["deletionGracePeriodSeconds"] == 5  # never lengthened
        shorter = await store.delete("pods", "runnerd", "p", grace_period_s=2)
        assert shorter["metadata"]["deletionGracePeriodSeconds"] == 2
        await store.remove("pods", "runnerd", "p")
    assert store.get("pods", "runnerd", "p") is None


async def test_pagination(kube: httpx.AsyncClient) -> None:
    for i in range(5):
        await kube.post(PODS, json=build_pod(f"p{i}"))
    first = (await kube.get(PODS, params={"limit": 2})).json()
    assert len(first["items"]) == 2 and first["metadata"]["remainingItemCount"] == 3
    names = [p["metadata"]["name"] for p in first["items"]]
    cont = first["metadata"]["continue"]
    while cont:
        page = (await kube.get(PODS, params={"limit": 2, "continue": cont})).json()
        names += [p["metadata"]["name"] for p in page["items"]]
        cont = page["metadata"].get("continue")
    assert names == [f"p{i}" for i in range(5)]


async def test_dry_run_is_refused_not_performed(kube: httpx.AsyncClient) -> None:
    r = await kube.post(PODS, json=build_pod("a"), params={"dryRun": "All"})
    assert r.status_code == 400 and r.json()["message"] == "kubesim does not implement dryRun"
    assert (await kube.get(f"{PODS}/a")).status_code == 404


async def test_unsupported_verbs_are_405(kube: httpx.AsyncClient) -> None:
    await kube.post(PODS, json=build_pod("a"))
    r = await kube.request("PUT", f"{PODS}/a/status", json=build_pod("a"))
    assert r.status_code == 405 and r.json()["reason"] == "MethodNotAllowed"
    assert (await kube.delete(PODS)).status_code == 405  # deletecollection
    assert (await kube.post("/api/v1/pods", json=build_pod("b"))).status_code == 405
    assert (await kube.delete(f"{PODS}/a/status")).status_code == 405
    assert (await kube.get("/api/v1/pods/a")).json()["details"] == {}  # generic 404
    assert len((await kube.get("/api/v1/pods")).json()["items"]) == 1


async def test_json_is_html_escaped_as_go_writes_it(kube: httpx.AsyncClient) -> None:
    pod = build_pod("a")
    pod["spec"]["containers"][0]["command"] = ["sh", "-c", "a && b <x>"]
    r = await kube.post(PODS, json=pod)
    assert '"sh","-c","a \\u0026\\u0026 b \\u003cx\\u003e"' in r.text
    assert r.json()["spec"]["containers"][0]["command"][2] == "a && b <x>"


async def test_rbac_on_a_cluster_scoped_resource(
    apiserver: KubeSim, kube: httpx.AsyncClient
) -> None:
    apiserver.faults.deny("list", "namespaces")
    r = await kube.get("/api/v1/namespaces")
    assert r.status_code == 403
    assert r.json()["message"] == (
        'namespaces is forbidden: User "system:serviceaccount:runnerd:runnerd" cannot list '
        'resource "namespaces" in API group "" at the cluster scope'
    )


async def test_concurrent_creates_cannot_overrun_a_quota(
    apiserver: KubeSim, kube: httpx.AsyncClient
) -> None:
    await apiserver.faults.set_quota("runnerd", "count", {"pods": "3"})
    codes: list[int] = []

    async def create(i: int) -> None:
        codes.append((await kube.post(PODS, json=build_pod(f"p{i}"))).status_code)

    async with trio.open_nursery() as nursery:
        for i in range(10):
            nursery.start_soon(create, i)
    assert sorted(codes) == [201] * 3 + [403] * 7
