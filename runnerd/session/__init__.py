"""The core: sessions and the manager that runs them.

Owns the session registry and its replay rings (`registry`, pure), one
session's state (`session`: its `SessionPhase`, one backend stop at a time;
`sink`: the `Sink` its backend reports to and the report the core's watchers
write to), the `SessionManager`
(`manager`: one nursery per session, the only place a session's lifecycle is
decided; `stopping`: a user stop and a shutdown, asked and waited for;
`running`: one workload's run under its stop scope and TTL, with the
core's watchers of `Started.address` (`runnerd.workload.supervision`) in its
nursery; `ending`: the one `Ending` a run returns and the table to its wire
status, pure; `errors`: its refusals; `recovery`: state files and adoption
after a restart; `statefile`: their format; `statewriter`: their one writer,
off the event loop), the stream reader both `/v1` streams use (`reader`: a
ring from a cursor, gaps, heartbeats), admission
(`admission`: a request body to a `RunSpec`, with its tier's limits and
`paths` bundle-path normalisation, pure; its `Catalog` is re-checked by a
session's task just before the backend runs, so no backend sees the
catalog) and the capabilities document (`capabilities`, pure).

Watch sessions: `watchsession` (the session object, a `Session` of mode
"watch"; `surface` the members every session answers, a run session with
`409 not_a_watch_session`), `apps` (one app's ring, handle, restarts),
`appset` (a session's apps in order, kept across `PUT /apps`),
`appsink` (what an app's generation and its watchers report to),
`generations` (an app's generations, one at a time), `watching` (the
driver: `open_watch`, serving, debounce, checkpoints, idle suspend,
resume, the TTL), `publishing` (the port set through `WatchHost.publish`:
`running.endpoints`, rejected ports), `reopen` (`PUT /apps` where a place
holds a fixed app set), `watchmanage` (the manager's watch side: start,
resume, the watch cap, eviction of suspended sessions, adoption),
`watchrecord` (the watch records in the state dir that bring a session
back after a restart, where places outlive the daemon) and `watchadopt`
(keeping one up to date, a record as a session), `watchspec` (what
admission builds); `resize` is the resize coalescing both modes share.

May import: `contract`, `errors`, `metrics`, `atomic_file`, `backend`,
`config`, `workload`, `watch`. Never a backend package, `http`, `daemon` or
`cli`: a backend reaches the core only through the `runnerd.backend` seam.
"""
