"""`KubeSettings`: what the Kubernetes backend is configured with. Pure data.

The config parser (the `[kubernetes]` section) will produce this; the field
names follow the operator-facing keys (`start_deadline_seconds` becomes
`start_deadline_s`, as durations are named `*_s` in code). Every default is
justified where it is set.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KubeSettings:
    # Path to a kubeconfig. None: `$KUBECONFIG` (merged), else in-cluster files,
    # else `~/.kube/config` — the order kubectl users expect, with in-cluster
    # ahead of the home file because a daemon in a pod has no useful home.
    kubeconfig: str | None = None
    # Context name. None: the kubeconfig's `current-context`.
    context: str | None = None
    # Session namespace. None: the context's namespace (or the in-cluster
    # namespace file), else "default", as kubectl resolves it.
    namespace: str | None = None
    # The URL pods use to reach runnerd's bundle endpoint (`bundle_listen`).
    # No default can be right: it depends on the cluster's network.
    self_url: str = ""
    # The listener serving `/internal/bundles/`. Separate from the API listeners
    # so the API never has to be reachable from pods; all interfaces by default
    # because pods reach it over the pod network.
    bundle_listen: str = "tcp:0.0.0.0:8063"
    # The body-fetch init container's image: it needs only `sh`, `wget`, `tar`.
    # A pinned busybox: small, on every registry mirror, and its wget is enough.
    init_image: str = "busybox:1.36"
    # A sandbox RuntimeClass (gVisor, Kata) when the cluster offers one; unset
    # means the cluster default, since a wrong name makes every pod unschedulable.
    runtime_class: str | None = None
    # Pull secret for the kernel image, in the session namespace. Unset: public images.
    image_pull_secret: str | None = None
    # The `app.kubernetes.io/managed-by` label value on every pod runnerd
    # creates: the shared watch selects on it, and the reaper deletes by it.
    # One value per runnerd instance sharing a namespace.
    managed_by: str = "runnerd"
    # A pod not Running by then fails its start and is deleted. Two minutes:
    # a cold pull of the kernel image on a slow node takes tens of seconds;
    # a session the user waits longer for than this is better reported failed.
    start_deadline_s: float = 120.0
    # How long an image pull may back off (ErrImagePull / ImagePullBackOff)
    # before the start fails. A registry hiccup heals within the kubelet's
    # first retries (10 s, 20 s); a wrong image name never does.
    pull_backoff_grace_s: float = 30.0
