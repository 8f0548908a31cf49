"""runnerd: a host daemon serving the Telo runner `/v1` contract.

The packages are layers; each imports only from the layers above it in this
list (`tests/layout/test_layers.py` checks it, and that the pure ones stay pure):

- `errors`, `metrics`, `atomic_file`: runnerd's error base, the metrics
  interface, the atomic file write (no runnerd imports);
- `contract`: the wire types and the checks a body meets before its schema
  (pure; imports only `errors`);
- `backend`: the seam a backend implements (types and protocols only);
- `config`: the operator's file, read into frozen dataclasses (pure);
- `workload`: the core's watchers of a running workload (reachability,
  debug relay), started from the address a backend reports;
- `watch`: watch sessions' pure rules (workspace paths, change sets, the
  reload budget, the restart debounce, run generations, the app checks);
  the same rank as `workload`, and neither imports the other;
- `session`: sessions, their rings, the manager, admission (the core);
- `local`, `kube`: the backends, the same rank as `session`;
  they import the seam and config (`local` also `watch` and `workload`)
  and the layers above those, never the core or the edges, and never each
  other;
- `backends`: the one table naming the built backends, and the `Provider`
  protocol each backend package satisfies;
- `http`: the quart-trio edge;
- `daemon`: the root nursery, listeners, systemd, logs, reload;
- `cli`: `runnerd serve | check-config` and the entry point;
- `client`: the client verbs; they speak HTTP to a daemon and import nothing
  of the server.
"""

__version__ = "0.1.0"
