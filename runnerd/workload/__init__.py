"""The core's watchers of a running workload, through the seam's `WorkloadAddress`.

Owns `supervision` (one app's watch: what the session machinery starts once
a backend reports `Started`), `reachability` (TCP probes of a session's
declared ports, reported as `reachability` events) and `debug_relay` (a
workload's debug stream as `debug` events). Backend-neutral: a backend says
where its workload is; it never starts these itself.

May import: `contract`, `errors`, `backend`. Never `session`, a backend
package, `http` or `daemon`.
"""
