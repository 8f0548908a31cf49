"""`WatchSessionSpec`: everything starting one watch session needs. Pure.

Built by admission (`runnerd.session.admission`) from a `POST /v1/sessions`
with `mode: "watch"` once every check passed, and handed to the session
manager's `start_watch`. Frozen; the agent's env (its token included) is a
secret and stays out of repr.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runnerd.backend.watch import AgentLaunch, WatchSpec
from runnerd.watch.apps import AppSpec


@dataclass(frozen=True)
class WatchSessionSpec:
    """`watch`: identity (limits: the `limits.app` tier with
    `watch.max_ttl_seconds` as its TTL; `inspect` on), creation (image, the
    apps' env, the bundle), no checkpoint. `apps`: checked (check 10), in
    the order given. `agent`: the co-resident agent (env = catalog env +
    its token under `token_env`), None without one. `agent_token`: the
    token for the agent endpoint's `token` (None without `token_env`)."""

    watch: WatchSpec
    apps: tuple[AppSpec, ...]
    agent: AgentLaunch | None = None
    agent_token: str | None = field(default=None, repr=False)

    @property
    def session_id(self) -> str:
        return self.watch.session_id
