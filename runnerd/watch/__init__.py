"""Watch sessions' pure core: the rules, without IO or time of their own.

A watch session is a workspace with one or more apps restarted on every
edit (the contract's "Watch sessions"; issue 19). This package holds what
can be decided without touching a process, a file or a clock, so the IO
side only applies its answers:

- `errors`: `WatchError`, the refusals these rules make (status, code);
- `paths`: workspace path normalisation (`invalid_path`), the listing
  filter and order, the file route's query;
- `changes`: a `POST /workspace` body parsed into a `ChangeSet` (schema and
  strict base64 first, then every path, refusing the set whole);
- `budget`: the per-session reload budget (one sliding 60 s window);
- `debounce`: the 300 ms restart debounce;
- `runs`: per-app generations and their `run` events, as a state machine;
- `apps`: the app checks of `POST /v1/sessions` and `PUT /apps` (checks 4,
  8 and 10) and the defaults;
- `kernel`: a self-watching app's generations and announced ports,
  projected from its kernel's `Kernel.*` debug frames.

Time is passed in as `now` (seconds on a monotonic clock). The session
core (`runnerd.session.watchsession`), the backends and the routes
(`runnerd.http.workspace`, admission) apply these rules.

May import: `contract`, `errors`, `config`; nothing above (and no trio).
"""
