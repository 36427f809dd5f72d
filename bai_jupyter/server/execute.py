"""``POST /bai/api/v1/sessions/<key>/execute``: run code on main1 (see ``kernel_runs``)."""

from __future__ import annotations

import json

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..errors import InvalidRequest
from .base import BaiHandler
from .kernel_runs import MODES

__all__ = ["ExecuteHandler"]

_BODY_KEYS = ("code", "mode", "run_id")


class ExecuteHandler(BaiHandler):
    """``{code, mode, run_id}`` → ``{run_id, status, exit_code, console}``."""

    @web.authenticated
    @authorized
    async def post(self, key: str) -> None:
        body = self.json_body(known=_BODY_KEYS)
        mode = body.get("mode", "query")
        if mode not in MODES:
            raise InvalidRequest(
                f"mode: must be one of {', '.join(MODES)}, got {mode!r}", field="mode"
            )
        code = body.get("code", "")
        if not isinstance(code, str):
            raise InvalidRequest(
                f"code: must be a string, got {json.dumps(code)[:60]}", field="code"
            )
        run_id = body.get("run_id")
        if run_id is not None and (not isinstance(run_id, str) or not 0 < len(run_id) <= 64):
            raise InvalidRequest("run_id: must be a string of 1 to 64 characters", field="run_id")
        session = await self.api.get(key, connection=True)
        self.app.activity.note(self.api, session.id, "execute")
        self.write_json(await self.app.runs.step(session, mode, code, run_id))
