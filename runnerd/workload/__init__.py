"""IO helpers any backend uses to watch a workload.

Owns `reachability` (TCP probes of a session's declared ports, reported as
`reachability` events) and `debug_relay` (a workload's debug stream as
`debug` events).

May import: `contract`, `errors`, `backend`. Never `session`, a backend
package, `http` or `daemon`.
"""
