"""The HTTP edge of runnerd: quart-trio routes for the `/v1` contract.

One module per concern: `app` (`create_app` wires the rest together),
`state` (`AppState`: the protocol of what the routes need of the daemon,
which the daemon's runtime object satisfies), `errors` (JSON error bodies),
`guard` (Host/Origin checks), `cors`, `meta` (health, capabilities, probe,
the OpenAPI document), `sessions` (start, inspect, stop), `workspace` (a
watch session's workspace, reload, apps and resume routes), `listing`, `events`
(Server-Sent Events), `io` (the WebSocket PTY channel; both frame what a
`runnerd.session.reader` hands out), `openapi` (the pure document builder;
`openapi_watch` its watch-session part),
`counting` (HTTP metrics), `server` (hypercorn's accept loop, capped),
`connection` (hypercorn's connection handler, fixed), `protocol` (hypercorn's
HTTP/1.1 protocol, hardened), `wsframes` (WebSocket frame lengths, pure).

May import: `contract`, `errors`, `metrics`, `backend`, `config`, `watch`,
`session`.
Never a backend package, `daemon` or `cli`.
"""
