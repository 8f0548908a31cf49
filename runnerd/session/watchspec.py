"""`WatchSessionSpec`: everything a watch session is started from.

Admission (`runnerd.session.admission`, `POST /v1/sessions` with `mode:
"watch"`) builds it once every check passed; `SessionManager.start_watch`
registers and runs it. `watch` is the backend's part (identity, creation,
no checkpoint: the core adds the latest one on a resume); `apps` are the
checked apps (check 10), in declaration order; `agent` is the co-resident
agent's launch (its env holds the catalog env and the minted token:
secrets, never logged) and `agent_token` the token a client gets on
`running.agent` (None without `token_env`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runnerd.backend.watch import AgentLaunch, WatchSpec
from runnerd.watch.apps import AppSpec


@dataclass(frozen=True)
class WatchSessionSpec:
    """A watch session as admission built it (see the module docstring)."""

    watch: WatchSpec
    apps: tuple[AppSpec, ...]
    agent: AgentLaunch | None = None
    agent_token: str | None = field(default=None, repr=False)

    @property
    def session_id(self) -> str:
        return self.watch.session_id
