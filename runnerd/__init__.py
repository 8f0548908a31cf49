"""runnerd: a host daemon serving the Telo runner `/v1` contract.

The packages are layers; each imports only from the layers above it in this
list (`tests/layout/test_layers.py` checks it, and that the pure ones stay pure):

- `contract`, `json_checks`, `errors`, `metrics`: the wire types, runnerd's
  error base, the metrics interface (pure; no runnerd imports but each other);
- `backend`: the seam a backend implements (types and protocols only);
- `config`: the operator's file, read into frozen dataclasses (pure);
- `workload`: the core's watchers of a running workload (reachability,
  debug relay), started from the address a backend reports;
- `session`: sessions, their rings, the manager, admission (the core);
- `local`, `kube`: the backends;
  they import the seam, config and workload, never the core or the edges,
  and never each other;
- `http`: the quart-trio edge;
- `daemon`: the root nursery, listeners, systemd, logs, reload;
- `cli`: `runnerd serve | check-config` and the entry point;
- `client`: the client verbs; they speak HTTP to a daemon and import nothing
  of the server.
"""

__version__ = "0.1.0"
