"""The watch pod's workspace side through a real daemon on the test cluster
(issue 20): a ConfigMap already under the workspace app's content-addressed
name is read back before it is mounted, never trusted blindly; a workspace
container that dies ends the session; the backend's capabilities say where
its apps run."""

from __future__ import annotations

from pathlib import Path

from runnerd.kube.settings import KubeSettings
from runnerd.kube.workspaceapp import configmap_for
from tests.e2e.watch_client import final_status, has_status, wait_frames
from tests.kube.daemon import kube_daemon, session_pods
from tests.kube.test_daemon_watch import APP, TIMEOUT_S, WATCH, start, wait_gone
from tests.kubesim.server import KubeSim
from tests.kubesim.test_clients_kubectl import kubectl

NAMESPACE = "runnerd"
CM_NAME = configmap_for(KubeSettings(self_url="http://x.test"))["metadata"]["name"]


async def make_configmap(sim: KubeSim, tmp_path: Path, *labels: str) -> None:
    """What another user of the namespace does: a ConfigMap under our name."""
    done = await kubectl(
        sim, tmp_path, "-n", NAMESPACE, "create", "configmap", CM_NAME,
        "--from-literal=telo.yaml=kind: Telo.Application",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    if labels:
        done = await kubectl(sim, tmp_path, "-n", NAMESPACE, "label", "configmap", CM_NAME, *labels)
        assert done.returncode == 0, done.stderr


def stored_data(sim: KubeSim) -> dict[str, str]:
    [cm] = [c for c in sim.store.list("configmaps", NAMESPACE) if c["metadata"]["name"] == CM_NAME]
    data: dict[str, str] = cm["data"]
    return data


async def test_a_foreign_configmap_under_our_name_refuses_the_start(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    await make_configmap(kubesim, tmp_path)
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as daemon, daemon.client() as client:
        session_id = await start(client, {"app.telo": APP})
        frames = await wait_frames(client, session_id, has_status("failed"), timeout_s=TIMEOUT_S)
        [status] = [f.data["status"] for f in frames if f.event == "status"][-1:]
        assert CM_NAME in status["message"] and "not runnerd's" in status["message"], status
        assert session_pods(kubesim) == []
    assert stored_data(kubesim) == {"telo.yaml": "kind: Telo.Application"}  # left alone


async def test_a_damaged_configmap_of_ours_is_replaced_before_it_is_mounted(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    labels = ("app.kubernetes.io/managed-by=runnerd", "runnerd.telo.run/role=workspace-app")
    await make_configmap(kubesim, tmp_path, *labels)
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as daemon, daemon.client() as client:
        session_id = await start(client, {"app.telo": APP})
        await wait_frames(client, session_id, has_status("running"), timeout_s=TIMEOUT_S)
        assert stored_data(kubesim) == configmap_for(KubeSettings(self_url="http://x.test"))["data"]


async def test_a_workspace_container_that_dies_while_running_fails_the_session(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    """No zombie `running` session whose workspace routes answer 500 forever."""
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as daemon, daemon.client() as client:
        session_id = await start(client, {"app.telo": APP})
        await wait_frames(client, session_id, has_status("running"), timeout_s=TIMEOUT_S)
        [pod] = session_pods(kubesim)
        assert kubesim.kubelet is not None
        await kubesim.kubelet.kill_container(NAMESPACE, pod, "workspace")  # an OOM kill
        status = await final_status(client, session_id, timeout_s=TIMEOUT_S)
        assert status == {
            "kind": "failed",
            "message": "the workspace container exited with code 137",
        }
        await wait_gone(daemon, kubesim)


async def test_the_kubernetes_backends_capabilities_say_where_apps_run(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    """Issue 20: the default description said "on this host" on this backend too."""
    async with kube_daemon(kubesim, tmp_path, watch=WATCH) as daemon, daemon.client() as client:
        answer = await client.get("/v1/capabilities")
        assert answer.status_code == 200, answer.text
        description = answer.json()["description"]
        assert description.startswith("Runs Telo applications on a Kubernetes cluster"), description
        assert "on this host" not in description
