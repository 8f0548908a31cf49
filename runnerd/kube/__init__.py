"""The Kubernetes backend's parts below the backend seam (sessions as pods).

Pure: `settings`, `errors`, `podstatus`, `podspec`, `bundle`, `kubeconfig`,
`policy` (the client's retry classes, backoff, timeouts), `ledger` (what is
known about the session pods across runs: live, stopping, abandoned, stopped
by the previous process, given up on), `podphase` (one pod run's phases,
their transition table, its teardown plan), `routehealth` (the routing
layer and a route's verdict from its status), `endpoints` (the Service,
Ingress and HTTPRoute shapes).
IO at the edge: `credentials`, `client` (httpx; `open_kube_client(...,
transport=...)` is the test seam: an `httpx.MockTransport` in place of the
network, so the client's policy is tested without a cluster), `exchange`
(the client's one retry loop), `informer` (the one shared pod watch: a
`Reflector` over a `ListerWatcher` protocol, so it too is tested on a fake),
`podcache` (the informer's store and fan-out, with the consumers'
consistency contract), `attach` (the PTY bridge over trio-websocket),
`terminal` (the attach kept up, the log spliced and backfilled; the pure
splice itself is `splice`'s), `podstop`
(a pod's delete, the stop's and the teardown's), `podrun` (one session's pod
from create or adoption to teardown: `PodRun`), `routing` (the layer
resolved at start) and `routes` (a session's routes published and their
health followed), `ensure` (an object created or brought up to date). No httpx name escapes this
package: every apiserver answer that is not 2xx becomes an
`errors.KubeError` whose `str()` is client-safe.

What the core asks of a backend package (`runnerd.backends.Provider`) is
`provider`'s; `runnerd.backends.BUILT` names that module rather than this
package, so importing a pure part (`settings`, `podstatus`) never pulls in
trio or httpx. The `[kubernetes]` table is this package's own: `runnerd.config`
keeps it unread, `settings.parse_settings` reads it into `settings.KubeSettings`
(and `settings.render` prints it), and every part is handed those typed
(`config.settings` of the `Config[KubeSettings]` the provider receives).
`backend` is `KubeBackend`, the parts put together: one `podrun.PodRun` per
`run()`, one `ledger.PodLedger` per process.

May import (and does): `contract`, `metrics`, `atomic_file`, `backend`,
`config`. Never `session`, `http`, `daemon`, `cli` or another backend.

How `backend.KubeBackend` and `provider` put them together:

- At start (off the event loop): `kubeconfig.load_connection(settings,
  os.environ, Path.home())` → `Connection`; then `async with
  client.open_kube_client(conn) as kube` for the daemon's life, and
  `nursery.start(informer.PodInformer(kube, podspec.managed_by_selector(settings)).run)`
  (reports started at once; the apiserver never holds up the boot), after
  `routing = await routing.resolve_routing(kube, settings)` (a refusal is a
  `ConfigError`: exit 2; it asks the apiserver only when the mode needs it).
- Per bundle session: `archive = await trio.to_thread.run_sync(
  bundle.build_bundle_archive, spec.bundle)`; `token = tokens.stage(sid,
  archive, now)` on one `bundle.BundleTokens`; the URL is
  `{settings.self_url}/internal/bundles/{sid}?token={token}`, served by
  `tokens.redeem(sid, token, now)` on `bundle_listen`; `tokens.drop(sid)` at
  the session's end.
- `pod = podspec.build_pod(settings, spec, bundle_url=…, created_at=…)`;
  `await kube.create_pod(pod, operation=…, is_ours=lambda p:
  podspec.is_ours(p, settings, sid))` (raise `errors.start_error(err, "create")`).
- `async with routing.session_routes(spec.identity, pod, report) as routes:`
  for the rest of the run, `(await routes.publish(ports)).endpoints` → the
  endpoints `running` announces (with `routing_base_domain`: a Service and an
  Ingress or one HTTPRoute per tcp port, owned by the pod; route health as
  `route` events; a refusal is a terminal line, never raised).
- `with informer.subscribe(podspec.pod_name(sid)) as sub:` then feed
  `podstatus.StartWatch(settings.pull_backoff_grace_s).observe(pod_or_None, now)`
  with the create response and each `await sub.next()` (`GONE` → None):
  `Progress` → sink.progress, `PodRunning` → attach + `running`,
  `StartFailed` → fail the start, `Exited`/`Failed` → the outcome. After the
  start, `podstatus.terminal_outcome(pod_or_None)` decides the end.
- The `WorkloadHandle` in `Started` is `PodRun`'s one `terminal.Relay`
  (`write`, `resize`), reported as soon as the pod runs: stdin and resizes
  go to the current attach (held, bounded, until the first is up).
  `terminal.keep_attached` runs `attach.run_attach(kube, name,
  on_output=…)` until the terminal ends: each attach that comes up hands its
  `attach.Terminal` to the `Relay`; one that returns `AttachEnd.DROPPED` or
  raises a classified `KubeError` is re-attached while the pod runs, and
  `terminal.read_log` (`pods/log`) fills in what was written before or in
  between.
- `POST /v1/probe`: `await probe.probe_cluster(kube)` (ready, or unavailable
  with a remediation line; bounded).
- Teardown (`podstop`, planned by `podphase.plan_teardown`): a user stop
  first awaits `Started.stop` (`PodRun.stop`: `podstop.delete_for_stop`),
  the pod's `await kube.delete_pod(name, operation=…, grace_period_s=…)`
  (idempotent: False when already gone); a refusal raises `StopRefused` and
  the session runs on; accepted, `ledger.stop_accepted(name)`. Then the run
  is cancelled and only waits for the pod to be gone; every other end
  deletes it then (`podstop.tear_down`, the result to `ledger.torn_down`);
  none on a detach (SIGUSR2). The provider's sweep deletes what the ledger
  has abandoned (`take_landed`), and at exit `ledger.undeleted(seen)` goes
  to `giveup.save` for the next process.
- After a restart (`on_restart = "adopt"`): `recovery.left_pods(informer.pods(),
  ledger.live, ledger.stopped_before)` reads each left pod back
  (`read_left_pod`: identity and status, or unreadable),
  `recovery.recover_pods` deletes the ended and unreadable ones and returns
  the `Recovered` to adopt; `run()` with no creation re-attaches.

Watch sessions' pods (issue 20) have parts of their own. Pure: `watchpod`
(the pod's name, shape and annotations: `build_watch_pod`,
`read_watch_annotations`), `workspaceapp` (the workspace application's
content-addressed ConfigMap, `configmap_for`, and its ensure and sweep,
which only call a `KubeClient` they are handed). IO: `workspaceapi`
(`WorkspaceApi`, the client of the pod's `workspace` container; httpx, its
own `transport=` seam).

Watch sessions (issue 20): `open_watch`/`adopt_watch` are `watchrun`'s (the
watch pod, `watchpod`'s shape, from create or adoption to its delete; the
workspace application's ConfigMap, `workspaceapp`'s), yielding a
`watchhost.KubeWatchHost` (the workspace API, `workspaceapi`'s client;
checkpoints, `watchcheckpoint`'s 0600 tars in the state dir; each app's
container attached by `terminal.keep_attached(..., container=)`); the pod's
and its containers' status read by `watchstatus` (pure). Recovery leaves
watch pods to `adopt_watch`; those nobody adopted go to the sweep.
"""
