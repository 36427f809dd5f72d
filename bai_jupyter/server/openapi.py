"""The OpenAPI 3 description of ``/bai/api/v1`` (served at ``…/openapi.json``).

Written by hand next to the handlers; tests check that its paths and methods
are exactly the routes', and fuzz the server from it.
"""

from __future__ import annotations

from typing import Any

from ..agents.capped import MAX_LOG_TAIL
from ..model import SessionType
from ..request import RESERVED_PORTS_TEXT
from .openapi_schemas import SCHEMAS, json_content, operation, path_param, query_param, ref, reply

__all__ = ["openapi"]


_SESSION_KEY = path_param("key", "session id, or a name of one of your sessions")
_KERNEL = query_param("kernel", "kernel hostname (main1, sub1 …) or id; default main1")
_SESSION = reply("the session", ref("Session"))
_ENDPOINT = reply("the endpoint", ref("Endpoint"))


def openapi(base_url: str = "/") -> dict[str, Any]:
    """The OpenAPI 3.0 document; ``base_url`` is the server's."""
    sessions = base_url.rstrip("/") + "/bai/api/v1"
    paths: dict[str, Any] = {
        "/sessions": {
            "get": operation(
                "the caller's sessions, oldest first",
                {"200": reply("sessions", {"type": "object"})},
                parameters=[
                    query_param("status", "comma-separated statuses, e.g. PENDING,RUNNING"),
                    query_param("type", "session type", enum=[t.value for t in SessionType]),
                    query_param("all", "admins: everyone's sessions", enum=["true", "false"]),
                ],
            ),
            "post": operation(
                "enqueue a session (a request, or a template plus overrides); dry_run=true "
                "only validates it and returns what would be created (200, nothing stored)",
                {
                    "201": reply("the PENDING session", ref("Session")),
                    "200": reply("dry_run: the session as it would be created", ref("Session")),
                },
                parameters=[
                    query_param("dry_run", "validate only, store nothing", enum=["true", "false"])
                ],
                requestBody={"required": True, **json_content(ref("SessionRequest"))},
            ),
        },
        "/sessions/{key}": {
            "parameters": [_SESSION_KEY],
            "get": operation(
                "a session (kernels' connection keys and a system session's SFTP private key "
                "left out unless connection=true)",
                {"200": _SESSION},
                parameters=[
                    query_param(
                        "connection",
                        "the owner only: include kernels[].info.connection.key and "
                        "sftp.private_key (403 otherwise)",
                        enum=["true", "false"],
                    )
                ],
            ),
            "delete": operation(
                "cancel a pending session, terminate a running one; purge=true deletes an "
                "ended session's record (409 while not ended)",
                {"200": _SESSION},
                parameters=[
                    query_param("reason", "status_info to record; default user-requested"),
                    query_param(
                        "purge", "delete an ended session's record", enum=["true", "false"]
                    ),
                ],
            ),
        },
        "/sessions/{key}/logs": {
            "parameters": [_SESSION_KEY],
            "get": operation(
                "a kernel's last lines (within the manager's log_limit bytes)",
                {"200": reply("{session_id, kernel, logs}", {"type": "object"})},
                parameters=[
                    _KERNEL,
                    {
                        **query_param(
                            "tail",
                            "how many of the last lines; default the manager's log_tail; "
                            "a first line '[… earlier output dropped …]' says log_limit cut them",
                        ),
                        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LOG_TAIL},
                    },
                ],
            ),
        },
        "/sessions/{key}/interrupt": {
            "parameters": [_SESSION_KEY],
            "post": operation(
                "SIGINT: interrupt what main1's kernel runs",
                {"204": reply("sent")},
                parameters=[_KERNEL],
            ),
        },
        "/sessions/{key}/restart": {
            "parameters": [_SESSION_KEY],
            "post": operation(
                "SIGHUP: restart main1's Jupyter kernel in place",
                {"204": reply("sent")},
                parameters=[_KERNEL],
            ),
        },
        "/sessions/{key}/execute": {
            "parameters": [_SESSION_KEY],
            "post": operation(
                "run code on main1's Jupyter kernel (query, batch), or continue a run",
                {"200": reply("output so far", ref("ExecuteReply"))},
                requestBody={"required": True, **json_content(ref("ExecuteRequest"))},
            ),
        },
        "/sessions/{key}/exec": {
            "parameters": [_SESSION_KEY],
            "post": operation(
                "run a command (an argv, no shell) in one kernel of a running session",
                {
                    "200": reply(
                        "{exit_code, output, truncated, dropped_bytes}: the output's last "
                        "exec_output_limit bytes; dropped_bytes came before them",
                        {"type": "object"},
                    )
                },
                requestBody={
                    "required": True,
                    **json_content(
                        {
                            "type": "object",
                            "required": ["command"],
                            "additionalProperties": False,
                            "properties": {
                                "command": {
                                    "type": "array",
                                    "minItems": 1,
                                    "items": {"type": "string"},
                                },
                                "kernel": {"type": "string", "default": "main1"},
                                "timeout": {
                                    "type": "number",
                                    "minimum": 0,
                                    "exclusiveMinimum": True,
                                    "maximum": 3600,
                                    "default": 60,
                                },
                            },
                        }
                    ),
                },
            ),
        },
        "/sessions/{key}/kernel-token": {
            "parameters": [_SESSION_KEY],
            "delete": operation(
                "revoke the session's kernel tokens (BAI_JUPYTER_TOKEN): every one issued so "
                "far gets 403 from now on, also after a server restart",
                {"200": reply("{session_id, revoked_at}", {"type": "object"})},
            ),
        },
        "/sessions/{key}/kernelspec": {
            "parameters": [_SESSION_KEY],
            "post": operation(
                "write the kernelspec bai-session-<id[:12]> that attaches notebooks' kernels "
                "to this interactive session (409 once it has ended)",
                {"201": reply("{name, session_id}", {"type": "object"})},
            ),
        },
        "/sessions/{key}/services": {
            "parameters": [_SESSION_KEY],
            "post": operation(
                "declare a service port main1 of a RUNNING session serves now, so the proxy "
                "reaches it (409 where the agent publishes main1's ports: declare them at "
                "creation instead)",
                {"200": _SESSION},
                requestBody={
                    "required": True,
                    **json_content(
                        {
                            "type": "object",
                            "required": ["service_port"],
                            "additionalProperties": False,
                            "properties": {
                                "service_port": {
                                    "type": "string",
                                    "description": "name:proto:port, e.g. web:http:8080 "
                                    f"({RESERVED_PORTS_TEXT} are reserved)",
                                }
                            },
                        }
                    ),
                },
            ),
        },
        "/sessions/{key}/activity": {
            "parameters": [_SESSION_KEY],
            "post": operation(
                "note that a running session is in use now: its idle_timeout starts again "
                "(409 once it has ended, 503 before it runs)",
                {"204": reply("noted")},
                requestBody={
                    "required": False,
                    **json_content(
                        {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "source": {
                                    "type": "string",
                                    "pattern": "^[A-Za-z0-9_.-]{1,32}$",
                                    "default": "api",
                                    "description": "what used it (shown in idle.activity)",
                                }
                            },
                        }
                    ),
                },
            ),
        },
        "/servers/{server}/heartbeat": {
            "parameters": [path_param("server", "the Jupyter server's id (its kernels' meta)")],
            "post": operation(
                "a Jupyter server in remote mode is alive: the sessions its kernels launched "
                "(meta jupyter_server) keep running; silent for server_gone_timeout, they end "
                "(server-gone)",
                {
                    "200": reply(
                        "{every: seconds until the next heartbeat is due}", {"type": "object"}
                    )
                },
            ),
        },
        "/templates": {
            "get": operation(
                "shared templates and the caller's own",
                {"200": reply("{templates: [...]}", {"type": "object"})},
            ),
            "post": operation(
                "create a template",
                {"201": reply("the template", ref("Template"))},
                requestBody={"required": True, **json_content(ref("Template"))},
            ),
        },
        "/templates/{name}": {
            "parameters": [path_param("name", "template name")],
            "get": operation("a template", {"200": reply("the template", ref("Template"))}),
            "put": operation(
                "create or replace a template",
                {"200": reply("the template", ref("Template"))},
                requestBody={"required": True, **json_content(ref("Template"))},
            ),
            "delete": operation(
                "remove a template",
                {"204": reply("removed")},
                parameters=[
                    query_param("shared", "the shared one (admins)", enum=["true", "false"])
                ],
            ),
        },
        "/endpoints": {
            "get": operation(
                "the caller's inference endpoints",
                {"200": reply("{endpoints: [...]}", {"type": "object"})},
                parameters=[
                    query_param("all", "admins: everyone's endpoints", enum=["true", "false"])
                ],
            ),
            "post": operation(
                "create an endpoint; its min_replicas replica sessions start",
                {"201": _ENDPOINT},
                requestBody={"required": True, **json_content(ref("EndpointRequest"))},
            ),
        },
        "/endpoints/{name}": {
            "parameters": [path_param("name", "endpoint name")],
            "get": operation("an endpoint, its replicas, load and decisions", {"200": _ENDPOINT}),
            "patch": operation(
                "change settings (scaling merges); a new replica request rolls out",
                {"200": _ENDPOINT},
                requestBody={"required": True, **json_content(ref("EndpointRequest"))},
            ),
            "delete": operation("remove an endpoint; its replicas end", {"200": _ENDPOINT}),
        },
        "/agents": {
            "get": operation(
                "agents: capacity, occupied, free, kernels",
                {"200": reply("{agents: [...]}", {"type": "object"})},
            )
        },
        "/pools": {
            "get": operation(
                "warm pools: size, max_slots, warm and starting sessions, claims, hits, misses",
                {"200": reply("{pools: [...]}", {"type": "object"})},
            )
        },
        "/scheduler": {
            "get": operation(
                "per resource group: settings and the pending queue with why each waits; "
                "which manager replica answered and which leads the store",
                {
                    "200": reply(
                        "{resource_groups: {...}, replica, leader: {replica, epoch, expires_in}}",
                        {"type": "object"},
                    )
                },
            )
        },
        "/events": {
            "get": operation(
                "session and kernel status changes (Server-Sent Events), from the store's "
                "change log: made by any process on the store",
                {
                    "200": {
                        "description": "id: SEQ / event: session / data: {session_id, status, "
                        "kernels, …, seq}; event: reset when a resumed stream missed events "
                        "the store no longer keeps",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    }
                },
                parameters=[
                    query_param(
                        "since",
                        "resume: first every event after this seq (or send Last-Event-ID)",
                        pattern="^[0-9]{1,18}$",
                    )
                ],
            )
        },
        "/openapi.json": {
            "get": operation("this document", {"200": reply("OpenAPI 3.0", {"type": "object"})})
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "bai-jupyter",
            "version": "1",
            "description": "Backend.AI-style compute sessions in a Jupyter server (docs/api.md). "
            "Authenticate as to Jupyter: 'Authorization: token <token>'.",
        },
        "servers": [{"url": sessions}],
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "token": {"type": "apiKey", "in": "header", "name": "Authorization"}
            },
        },
        "security": [{"token": []}],
        "paths": paths,
    }
