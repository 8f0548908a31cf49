"""What the Kubernetes backend exports to the core (`runnerd.backends.Provider`).

Owns the backend's answers to what the daemon, the CLI and the HTTP edge ask
of whichever backend is configured: its settings (`SETTINGS`, the
`[kubernetes]` table's `KubeSettings`: `parse_settings`, `render`,
`keep_bound` and `bound_changes` are `runnerd.kube.settings`', re-exported),
its config check (`kubernetes.self_url` is required: no default can be
right), the images it offers (only `default_image`, or the operator's
`allowed_images`), its stop timeout, and `open_backend`: the client, the
shared informer, the bundle listener and (with `on_restart = "reap"`) the
reaper, for the daemon's lifetime.
Nothing in it waits for the apiserver but the routing resolution
(`runnerd.kube.routing.resolve_routing`, bounded; only with a
`routing_base_domain` and a routing mode that asks the cluster): otherwise
a silent or absent apiserver never holds up the boot.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

import trio

import runnerd.kube.errors as errors
import runnerd.kube.giveup as giveup
from runnerd.backend import BackendContext
from runnerd.config import Config, ConfigError, parse_listen
from runnerd.contract import IoMode
from runnerd.kube.backend import KubeBackend
from runnerd.kube.bundle import BundleTokens
from runnerd.kube.bundlehttp import bind_bundle_listener, serve_bundles
from runnerd.kube.client import open_kube_client
from runnerd.kube.informer import PodInformer
from runnerd.kube.kubeconfig import KubeconfigError, load_connection
from runnerd.kube.ledger import PodLedger
from runnerd.kube.podcache import pod_name
from runnerd.kube.podrun import CREATE_GRACE_S
from runnerd.kube.podspec import managed_by_selector
from runnerd.kube.podstop import STOP_WAIT_S
from runnerd.kube.recovery import delete_stale
from runnerd.kube.routing import resolve_routing
from runnerd.kube.settings import KEYS as KEYS
from runnerd.kube.settings import KubeSettings
from runnerd.kube.settings import bound_changes as bound_changes
from runnerd.kube.settings import keep_bound as keep_bound
from runnerd.kube.settings import parse_settings as parse_settings
from runnerd.kube.settings import render as render
from runnerd.metrics import Metrics

NAME = "kubernetes"
SETTINGS = KubeSettings
# Watch sessions run as watch pods (`runnerd.kube.watchrun`): an app's
# container has a TTY, or its stdout and stderr apart.
WATCH_IO: tuple[IoMode, ...] = ("tty", "streams")
log = logging.getLogger(__name__)
# Staged bundles past their five minutes are swept this often.
TOKEN_SWEEP_S = 60.0
# How often the reaper looks for pods of abandoned creates that landed.
ABANDONED_SWEEP_S = 2.0


def check_config(config: Config[KubeSettings], *, reloaded: bool = False) -> None:
    """`kubernetes.self_url` is set: pods fetch their bundle from it.

    Raises:
        ConfigError: naming `kubernetes.self_url`.
    """
    if not config.settings.self_url:
        raise ConfigError(
            "kubernetes.self_url",
            'is required with backend = "kubernetes": the URL session pods use to reach'
            " bundle_listen (e.g. http://10.0.0.5:8063)",
        )


def offered_images(config: Config[KubeSettings]) -> tuple[str, ...] | None:
    """None: a bundle session runs `default_image` unless the operator lists more."""
    return None


def stop_timeout_s(config: Config[KubeSettings]) -> float:
    """A create's grace, the pod's delete and its wait to be gone, plus the
    request's own time."""
    return CREATE_GRACE_S + STOP_WAIT_S + 2.0


def config_warnings(config: Config[KubeSettings], daemon_path: str | None) -> list[str]:
    """What a valid `[kubernetes]` may still get wrong: a loopback `self_url`
    (no pod can reach it unless the cluster runs on this host), and the old
    name of `routing_base_domain`."""
    warnings: list[str] = []
    url = config.settings.self_url
    if "://127." in url or "://localhost" in url or "://[::1]" in url:
        warnings.append(
            f"kubernetes.self_url {url!r} is a loopback address: only a cluster on this"
            " host can reach it"
        )
    if config.settings.base_domain_alias:
        warnings.append(
            "kubernetes.ingress_base_domain is deprecated: rename it routing_base_domain"
            " (it applies to Gateway routing too)"
        )
    return warnings


def probe_ahead(config: Config[KubeSettings]) -> contextlib.AbstractContextManager[object]:
    """Nothing: the backend learns nothing of this host when it opens (and
    asks the apiserver nothing before it serves)."""
    return contextlib.nullcontext()


def open_backend(
    config: Config[KubeSettings], context: BackendContext
) -> contextlib.AbstractAsyncContextManager[KubeBackend]:
    """The Kubernetes backend for the daemon's lifetime, counting apiserver
    requests, watch restarts, re-lists and re-attaches in `context.metrics`
    (whose `runnerd_kube_*` series it registers). Its sessions run in pods,
    which see nothing of this host: `context.hidden_paths` has nothing to hide.

    On entry: the connection resolved (kubeconfig files read), the client
    opened, the bundle listener bound; then the informer, the bundle server
    and the reaper run in the background. None of it waits on the apiserver.

    Raises:
        ConfigError: no usable kubeconfig, or `bundle_listen` cannot be bound.
    """
    return _open_backend(config, context.metrics)


@contextlib.asynccontextmanager
async def _open_backend(
    config: Config[KubeSettings], metrics: Metrics
) -> AsyncIterator[KubeBackend]:
    settings = config.settings
    metrics.add_kube_series()
    try:
        conn = await trio.to_thread.run_sync(
            load_connection, settings, dict(os.environ), Path.home()
        )
    except KubeconfigError as exc:
        raise ConfigError("kubernetes.kubeconfig", str(exc)) from exc
    address = parse_listen(settings.bundle_listen)
    try:
        listener = await bind_bundle_listener(address.host or "", address.port or 0)
    except OSError as exc:
        raise ConfigError(
            "kubernetes.bundle_listen", f"cannot listen on {settings.bundle_listen}: {exc.strerror}"
        ) from exc
    try:
        async with open_kube_client(conn, metrics=metrics) as client:
            # Before anything runs (outside the nursery, so a refusal is not
            # wrapped in a group): it ends the start (exit 2).
            routing = await resolve_routing(client, settings)
            async with trio.open_nursery() as nursery:
                informer = PodInformer(client, managed_by_selector(settings))
                tokens = BundleTokens()
                ledger = await _load_ledger(config.runner.state_dir)
                backend = KubeBackend(
                    settings,
                    client,
                    informer,
                    tokens,
                    routing,
                    ledger=ledger,
                    state_dir=config.runner.state_dir,
                )
                await nursery.start(informer.run)
                nursery.start_soon(serve_bundles, listener, tokens)
                nursery.start_soon(_sweep_tokens, tokens)
                if settings.on_restart == "reap":  # else `recover()` adopts them
                    nursery.start_soon(_reap, backend, informer)
                nursery.start_soon(_sweep_abandoned, backend, informer)
                nursery.start_soon(_give_up_unadopted_watch, backend, settings.watch_adopt_grace_s)
                log.info(
                    "kubernetes backend: namespace %s via %s; bundles on %s; routing: %s",
                    client.namespace,
                    conn.source,
                    settings.bundle_listen,
                    routing.describe(),
                )
                try:
                    yield backend
                finally:
                    seen = {pod_name(p) for p in informer.pods()} if informer.synced else None
                    giveup.save(config.runner.state_dir, ledger.undeleted(seen))
                nursery.cancel_scope.cancel()
    except errors.NoCredentials as exc:
        raise ConfigError("kubernetes.kubeconfig", str(exc)) from exc
    finally:
        with trio.CancelScope(shield=True):
            await listener.aclose()


async def _load_ledger(state_dir: Path) -> PodLedger:
    """The ledger, with the pods the previous process stopped but could not
    delete (`giveup`): never adopted, and deleted by the sweep (or by
    recovery) once seen."""
    stopped_before = await trio.to_thread.run_sync(giveup.load, state_dir)
    return PodLedger(stopped_before, now=trio.current_time())


async def _sweep_tokens(tokens: BundleTokens) -> None:
    while True:
        await trio.sleep(TOKEN_SWEEP_S)
        tokens.expire(trio.current_time())


async def _reap(backend: KubeBackend, informer: PodInformer) -> None:
    """`on_restart = "reap"`: delete the pods a previous process left, once
    the informer has listed them; this process's own pods are spared."""
    await informer.wait_synced()
    left = [pod_name(p) for p in informer.pods() if not backend.ledger.is_live(pod_name(p))]
    for name in left:
        await delete_stale(backend.client, name, "a pod left by a previous run")
    if left:
        log.warning("deleted %d session pods left by a previous run", len(left))


async def _give_up_unadopted_watch(backend: KubeBackend, grace_s: float) -> None:
    """After recovery (with "adopt"), `grace_s` later: the watch pods no
    session adopted go to the sweep (`KubeBackend.sweep_unadopted_watch`)."""
    names = await backend.sweep_unadopted_watch(grace_s)
    if names:
        log.warning("deleting %d watch pods no session adopted after a restart", len(names))


async def _sweep_abandoned(backend: KubeBackend, informer: PodInformer) -> None:
    """For the daemon's life (whatever `on_restart`), delete the pods given
    up on (the ledger's abandoned: creates abandoned at a stop, deletes that
    failed) once the informer sees them; a delete that fails is tried again."""
    ledger = backend.ledger
    while True:
        await trio.sleep(ABANDONED_SWEEP_S)
        names = {pod_name(p) for p in informer.pods()}
        for name in ledger.take_landed(names, trio.current_time()):
            if await delete_stale(backend.client, name, "a pod given up on; retried"):
                ledger.swept(name)
