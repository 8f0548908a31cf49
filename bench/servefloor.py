"""The serving layer's floor: the smallest quart-trio app on hypercorn.

`python -m bench.servefloor [--deferred] SOCKET` serves, on a UNIX socket, the two
routes the benches time against the upstream runner, with nothing of
runnerd's behind them: `GET /v1/health` answers `{"status": "ok"}`, and
`POST /v1/sessions` reads and parses the JSON body and answers a 201 shaped
as runnerd's (`sessionId`, `streamUrl`, `createdAt`). What runnerd adds on
top (its Host/Origin guard, CORS, request counting, the body's checks, the
session's registration) is runnerd's own cost; what this costs is the
stack's (brief: quart-trio on hypercorn), so a goal below it cannot be met
by runnerd's code. Printed by `bench kuberun` beside both runners, and by
`bench startup` (its spawn → first 200 and idle RSS).

`--deferred` first installs runnerd's deferral of the modules a daemon
never uses (`runnerd.daemon.deferred`, as `runnerd serve` does before its
serving layer's import): the cheapest start the stack allows runnerd,
with none of runnerd's own modules, config or backend behind it.
"""

from __future__ import annotations

import secrets
import sys
import time

if __name__ == "__main__" and "--deferred" in sys.argv[1:]:
    # Before the serving layer's import, as `runnerd serve` does it.
    from runnerd.daemon.deferred import defer_unused_modules

    defer_unused_modules()

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart import Response, jsonify, request
from quart_trio import QuartTrio


def floor_app() -> QuartTrio:
    app = QuartTrio("servefloor")

    @app.get("/v1/health")
    async def health() -> Response:
        return jsonify({"status": "ok"})

    @app.post("/v1/sessions")
    async def start() -> tuple[Response, int]:
        body = await request.get_json()
        if not isinstance(body, dict):
            return jsonify({"error": "a JSON object"}), 400
        session_id = secrets.token_hex(6)
        return jsonify(
            {
                "sessionId": session_id,
                "streamUrl": f"/v1/sessions/{session_id}/events",
                "createdAt": time.time(),
            }
        ), 201

    return app


def main(socket_path: str) -> None:
    config = Config()
    config.bind = [f"unix:{socket_path}"]
    config.accesslog = None
    config.errorlog = None
    trio.run(serve, floor_app(), config)


if __name__ == "__main__":
    main(sys.argv[-1])
