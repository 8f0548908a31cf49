"""Pure parts of the kubelet: container spec → host process plan, status rendering."""

from __future__ import annotations

from pathlib import Path

from tests.kubesim import kubelet_status as st
from tests.kubesim.images import SHELL_IMAGE, Image
from tests.kubesim.kubelet_runtime import build_path_mapper, build_plan

H = Path("/host/pod")
POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "status": {"podIP": "127.0.0.9"}}


def test_mount_paths_map_where_a_path_starts_and_nowhere_else() -> None:
    to_host = build_path_mapper({"/app": H / "app", "/home": H / "h", "/home/telo": H / "ht"})
    assert to_host("/app") == "/host/pod/app"
    assert to_host("wget -qO- 'http://h:1/app/b?t=1' | tar -xz -C /app") == (
        "wget -qO- 'http://h:1/app/b?t=1' | tar -xz -C /host/pod/app"
    )
    assert to_host("PATH=/bin:/app/bin") == "PATH=/bin:/host/pod/app/bin"
    assert to_host("/apps /application") == "/apps /application"
    assert to_host("/home/telo/.npm /home/x") == "/host/pod/ht/.npm /host/pod/h/x"


def test_command_and_args_follow_kubernetes_override_rules() -> None:
    image = Image(entrypoint=("telo",), cmd=("--help",))

    def argv(**container: object) -> tuple[str, ...]:
        spec = {"name": "c", "image": "x", **container}
        return build_plan(spec, image, pod=POD, mounts={}, root_dir=H, bin_dir=H / "bin").argv

    assert argv() == ("telo", "--help")
    assert argv(args=["run", "e"]) == ("telo", "run", "e")
    assert argv(command=["sh"]) == ("sh",)  # a command drops the image's CMD
    assert argv(command=["sh"], args=["-c", "x"]) == ("sh", "-c", "x")


def test_env_expansion_field_refs_and_defaults() -> None:
    spec = {
        "name": "c",
        "image": "busybox",
        "command": ["echo", "$(GREETING) $(MISSING) $$(GREETING)"],
        "workingDir": "/srv/data",
        "tty": True,
        "env": [
            {"name": "GREETING", "value": "hi $(POD_IP)"},
            {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "CACHE", "value": "/cache/x"},
        ],
        "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
    }
    plan = build_plan(
        spec, SHELL_IMAGE, pod=POD, mounts={"/cache": H / "c"}, root_dir=H / "r", bin_dir=H / "b"
    )
    assert plan.argv == ("echo", "hi 127.0.0.9 $(MISSING) $(GREETING)")
    assert plan.env["ME"] == "p" and plan.env["HOSTNAME"] == "p"
    assert plan.env["CACHE"] == "/host/pod/c/x"
    assert plan.env["HOME"] == "/host/pod/r" and plan.env["TERM"] == "xterm"
    assert plan.env["PATH"].startswith("/host/pod/b:")
    assert plan.cwd == H / "r" / "srv" / "data"  # not under a mount: inside the pod's root


def test_qos_class() -> None:
    def qos(*resources: dict[str, object]) -> str:
        return st.build_qos_class({"containers": [{"resources": r} for r in resources]})

    both = {"cpu": "1", "memory": "1Gi"}
    assert qos({}) == "BestEffort"
    assert qos({"limits": both}) == "Guaranteed"  # requests default to limits
    assert qos({"limits": both, "requests": {"cpu": "500m", "memory": "1Gi"}}) == "Burstable"
    assert qos({"requests": {"cpu": "1"}}, {}) == "Burstable"


def test_condition_transition_times_move_only_when_status_flips() -> None:
    main = [st.ContainerModel("c", "docker.io/library/busybox:1")]
    model = st.PodModel([], main, "127.0.0.2", "127.0.0.1", "T0", "BestEffort")
    first = st.render_status(model, "T1")
    assert first["phase"] == "Pending"
    main[0].state, main[0].ready = {"running": {"startedAt": "T2"}}, True
    running = st.render_status(model, "T2")
    again = st.render_status(model, "T3")
    times = {c["type"]: c["lastTransitionTime"] for c in again["conditions"]}
    assert running["phase"] == again["phase"] == "Running"
    assert times == {
        "PodReadyToStartContainers": "T1",
        "Initialized": "T1",
        "Ready": "T2",
        "ContainersReady": "T2",
        "PodScheduled": "T1",
    }
    main[0].state, main[0].ready = st.terminated(0, "T2", "T4", "containerd://x"), False
    done = st.render_status(model, "T4")
    assert done["phase"] == "Succeeded"
    ready = next(c for c in done["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PodCompleted")
