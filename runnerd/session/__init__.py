"""The core: sessions and the manager that runs them.

Owns the session registry and its replay rings (`registry`, pure), one
session's state (`session`), the `SessionManager` (`manager`: one nursery
per session, the only place a session's lifecycle is decided; `running`: one
workload's run under its stop scope and TTL; `ending`: its terminal status;
`errors`: its refusals; `recovery`: state files and adoption after a
restart; `statefile`: their format; `statewriter`: their one writer, off
the event loop), the stream reader both `/v1`
streams use (`reader`: a ring from a cursor, gaps, heartbeats), admission
(`admission`: a request body to a `RunSpec`, with its tier's limits and
`paths` bundle-path normalisation, pure) and the capabilities document
(`capabilities`, pure).

May import: `contract`, `errors`, `metrics`, `backend`, `config`. Never a
backend package, `http`, `daemon` or `cli`: a backend reaches the core only
through the `runnerd.backend` seam.
"""
