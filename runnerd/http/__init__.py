"""The HTTP edge of runnerd: quart-trio routes for the `/v1` contract.

One module per concern: `errors` (JSON error bodies), `cors`, `meta` (health,
capabilities, probe, the OpenAPI document), `sessions` (start, inspect, stop),
`events` (Server-Sent Events), `io` (the WebSocket PTY channel), `waiting`
(how a stream writer waits on a session), `openapi` (the pure document
builder). `runnerd.app.create_app` wires them together.
"""
