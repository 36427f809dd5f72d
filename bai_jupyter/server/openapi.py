"""The OpenAPI 3 description of ``/bai/api/v1`` (served at ``…/openapi.json``).

Written by hand next to the handlers; tests check that its paths and methods
are exactly the routes', and fuzz the server from it.
"""

from __future__ import annotations

from typing import Any

from ..model import ClusterMode, SessionType, Status
from ..templates import (
    FIELDS,
    MAX_BATCH_TIMEOUT,
    MAX_CLUSTER_SIZE,
    MAX_COMMAND,
    MAX_DEPENDS_ON,
    MAX_ENV,
    MAX_MOUNTS,
    MAX_PRIORITY,
    MAX_SERVICE_PORTS,
    MAX_TIMESTAMP,
    NAME_RE,
)
from .execute import MODES

__all__ = ["openapi"]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _reply(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description, **(_json(schema) if schema else {})}


_ERRORS = {
    "400": _reply("invalid input: the message names the field and what to fix", _ref("Error")),
    "403": _reply("not authenticated, or not authorized for this resource", _ref("Error")),
    "404": _reply("no such session (of yours), template or kernel", _ref("Error")),
    "409": _reply("name taken, or the session is in the wrong state", _ref("Error")),
    "413": _reply("the body is over BaiJupyterApp.max_body_size", _ref("Error")),
    "503": _reply("not ready (session not RUNNING, manager not started); retry", _ref("Error")),
}

_NULLABLE_STRING = {"type": "string", "nullable": True}
_FIELD_SCHEMAS: dict[str, dict[str, Any]] = {
    "image": _NULLABLE_STRING,
    "name": {"type": "string", "pattern": f"^{NAME_RE.pattern}$", "nullable": True},
    "type": {"type": "string", "enum": [t.value for t in SessionType], "nullable": True},
    "resources": {
        "type": "object",
        "nullable": True,
        "additionalProperties": {"oneOf": [{"type": "string"}, {"type": "number"}]},
    },
    "cluster_size": {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_CLUSTER_SIZE,
        "nullable": True,
    },
    "cluster_mode": {"type": "string", "enum": [m.value for m in ClusterMode], "nullable": True},
    "resource_group": _NULLABLE_STRING,
    "priority": {"type": "integer", "minimum": 0, "maximum": MAX_PRIORITY, "nullable": True},
    "depends_on": {
        "type": "array",
        "items": {"type": "string"},
        "maxItems": MAX_DEPENDS_ON,
        "nullable": True,
    },
    "starts_at": {"type": "number", "minimum": 0, "maximum": MAX_TIMESTAMP, "nullable": True},
    "startup_command": {"type": "string", "maxLength": MAX_COMMAND, "nullable": True},
    "batch_timeout": {
        "type": "number",
        "exclusiveMinimum": True,
        "minimum": 0,
        "maximum": MAX_BATCH_TIMEOUT,
        "nullable": True,
    },
    "env": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "maxProperties": MAX_ENV,
        "nullable": True,
    },
    "mounts": {
        "type": "array",
        "items": {"type": "string"},
        "maxItems": MAX_MOUNTS,
        "nullable": True,
    },
    "service_ports": {
        "type": "array",
        "items": {"type": "string"},
        "maxItems": MAX_SERVICE_PORTS,
        "nullable": True,
    },
}
assert set(_FIELD_SCHEMAS) == set(FIELDS), "the OpenAPI request schema drifted from FIELDS"


def _spec_fields() -> dict[str, Any]:
    return {
        name: {**schema, "description": FIELDS[name].help}
        for name, schema in _FIELD_SCHEMAS.items()
    }


_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error", "message"],
        "properties": {
            "error": {"type": "string", "description": "stable code, e.g. invalid-request"},
            "message": {"type": "string", "description": "what is wrong and what to do"},
        },
    },
    "SessionRequest": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            **_spec_fields(),
            "template": {
                "type": "string",
                "nullable": True,
                "description": "name of a template whose fields this request overrides",
            },
            "meta": {"type": "object", "nullable": True, "description": "front ends' facts"},
        },
    },
    "Session": {
        "type": "object",
        "required": ["id", "owner", "status", "spec", "kernels", "services"],
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string", "nullable": True},
            "owner": {"type": "string"},
            "created_at": {"type": "number"},
            "status": {"type": "string", "enum": [s.value for s in Status]},
            "status_info": {"type": "string", "nullable": True},
            "status_data": {
                "type": "object",
                "description": "while pending: scheduler: {retries, last_try, "
                "failed_predicates, msg}; after a failed start: error",
            },
            "status_history": {"type": "array", "items": {"type": "object"}},
            "result": {"type": "string", "enum": ["UNDEFINED", "SUCCESS", "FAILURE"]},
            "exit_code": {"type": "integer", "nullable": True},
            "spec": {"type": "object"},
            "kernels": {"type": "array", "items": {"type": "object"}},
            "meta": {"type": "object"},
            "services": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "protocol": {"type": "string"},
                        "port": {"type": "integer"},
                        "url": {"type": "string", "nullable": True},
                    },
                },
            },
        },
    },
    "Template": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "pattern": f"^{NAME_RE.pattern}$"},
            "spec": {"type": "object", "properties": _spec_fields(), "additionalProperties": False},
            "description": {"type": "string"},
            "shared": {"type": "boolean", "description": "for every user (admins only)"},
        },
    },
    "ExecuteRequest": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "code": {
                "type": "string",
                "description": "code; a shell command in batch mode; the input text in input mode",
            },
            "mode": {"type": "string", "enum": list(MODES)},
            "run_id": {"type": "string", "minLength": 1, "maxLength": 64},
        },
    },
    "ExecuteReply": {
        "type": "object",
        "required": ["run_id", "status", "exit_code", "console"],
        "properties": {
            "run_id": {"type": "string"},
            "status": {"type": "string", "enum": ["finished", "continued", "waiting-input"]},
            "exit_code": {"type": "integer", "nullable": True},
            "console": {
                "type": "array",
                "description": "[kind, data] items: stdout, stderr (text); media, result "
                "({data: {mime: value}, metadata}); error ({ename, evalue, traceback}); clear",
                "items": {"type": "array", "minItems": 2, "maxItems": 2},
            },
            "prompt": {"type": "object", "description": "with waiting-input: {prompt, password}"},
        },
    },
}


def _key(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
        "description": description,
    }


def _query(name: str, description: str, **schema: Any) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": {"type": "string", **schema},
        "description": description,
    }


def _op(summary: str, ok: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"summary": summary, "responses": {**ok, **_ERRORS}, **extra}


_SESSION_KEY = _key("key", "session id, or a name of one of your sessions")
_KERNEL = _query("kernel", "kernel hostname (main1, sub1 …) or id; default main1")
_SESSION = _reply("the session", _ref("Session"))


def openapi(base_url: str = "/") -> dict[str, Any]:
    """The OpenAPI 3.0 document; ``base_url`` is the server's."""
    sessions = base_url.rstrip("/") + "/bai/api/v1"
    paths: dict[str, Any] = {
        "/sessions": {
            "get": _op(
                "the caller's sessions, oldest first",
                {"200": _reply("sessions", {"type": "object"})},
                parameters=[
                    _query("status", "comma-separated statuses, e.g. PENDING,RUNNING"),
                    _query("type", "session type", enum=[t.value for t in SessionType]),
                    _query("all", "admins: everyone's sessions", enum=["true", "false"]),
                ],
            ),
            "post": _op(
                "enqueue a session (a request, or a template plus overrides)",
                {
                    "201": _reply("the PENDING session", _ref("Session")),
                    "200": _reply("dry_run=true: the request is valid; nothing was stored"),
                },
                requestBody={"required": True, **_json(_ref("SessionRequest"))},
                parameters=[
                    _query("dry_run", "check only, create nothing", enum=["true", "false"])
                ],
            ),
        },
        "/sessions/{key}": {
            "parameters": [_SESSION_KEY],
            "get": _op(
                "a session (kernels' connection keys left out unless connection=true)",
                {"200": _SESSION},
                parameters=[
                    _query(
                        "connection",
                        "the owner only: include kernels[].info.connection.key (403 otherwise)",
                        enum=["true", "false"],
                    )
                ],
            ),
            "delete": _op(
                "cancel a pending session, terminate a running one; purge=true deletes an "
                "ended session's record (409 while not ended)",
                {"200": _SESSION},
                parameters=[
                    _query("reason", "status_info to record; default user-requested"),
                    _query("purge", "delete an ended session's record", enum=["true", "false"]),
                ],
            ),
        },
        "/sessions/{key}/logs": {
            "parameters": [_SESSION_KEY],
            "get": _op(
                "a kernel's output",
                {"200": _reply("{session_id, kernel, logs}", {"type": "object"})},
                parameters=[_KERNEL],
            ),
        },
        "/sessions/{key}/interrupt": {
            "parameters": [_SESSION_KEY],
            "post": _op(
                "SIGINT: interrupt what main1's kernel runs",
                {"204": _reply("sent")},
                parameters=[_KERNEL],
            ),
        },
        "/sessions/{key}/restart": {
            "parameters": [_SESSION_KEY],
            "post": _op(
                "SIGHUP: restart main1's Jupyter kernel in place",
                {"204": _reply("sent")},
                parameters=[_KERNEL],
            ),
        },
        "/sessions/{key}/execute": {
            "parameters": [_SESSION_KEY],
            "post": _op(
                "run code on main1's Jupyter kernel (query, batch), or continue a run",
                {"200": _reply("output so far", _ref("ExecuteReply"))},
                requestBody={"required": True, **_json(_ref("ExecuteRequest"))},
            ),
        },
        "/sessions/{key}/kernel-token": {
            "parameters": [_SESSION_KEY],
            "delete": _op(
                "revoke the session's kernel tokens (BAI_JUPYTER_TOKEN): every one issued so "
                "far gets 403 from now on, also after a server restart",
                {"200": _reply("{session_id, revoked_at}", {"type": "object"})},
            ),
        },
        "/sessions/{key}/kernelspec": {
            "parameters": [_SESSION_KEY],
            "post": _op(
                "write the kernelspec bai-session-<id[:12]> that attaches notebooks' kernels "
                "to this interactive session (409 once it has ended)",
                {"201": _reply("{name, session_id}", {"type": "object"})},
            ),
        },
        "/sessions/{key}/services": {
            "parameters": [_SESSION_KEY],
            "post": _op(
                "declare a service port main1 of a RUNNING session serves now, so the proxy "
                "reaches it (409 where the agent publishes main1's ports: declare them at "
                "creation instead)",
                {"200": _SESSION},
                requestBody={
                    "required": True,
                    **_json(
                        {
                            "type": "object",
                            "required": ["service_port"],
                            "additionalProperties": False,
                            "properties": {
                                "service_port": {
                                    "type": "string",
                                    "description": "name:proto:port, e.g. web:http:8080 "
                                    "(2200 and 2300-2304 are reserved)",
                                }
                            },
                        }
                    ),
                },
            ),
        },
        "/templates": {
            "get": _op(
                "shared templates and the caller's own",
                {"200": _reply("{templates: [...]}", {"type": "object"})},
            ),
            "post": _op(
                "create a template",
                {"201": _reply("the template", _ref("Template"))},
                requestBody={"required": True, **_json(_ref("Template"))},
            ),
        },
        "/templates/{name}": {
            "parameters": [_key("name", "template name")],
            "get": _op("a template", {"200": _reply("the template", _ref("Template"))}),
            "put": _op(
                "create or replace a template",
                {"200": _reply("the template", _ref("Template"))},
                requestBody={"required": True, **_json(_ref("Template"))},
            ),
            "delete": _op(
                "remove a template",
                {"204": _reply("removed")},
                parameters=[_query("shared", "the shared one (admins)", enum=["true", "false"])],
            ),
        },
        "/agents": {
            "get": _op(
                "agents: capacity, occupied, free, kernels",
                {"200": _reply("{agents: [...]}", {"type": "object"})},
            )
        },
        "/scheduler": {
            "get": _op(
                "per resource group: settings and the pending queue with why each waits",
                {"200": _reply("{resource_groups: {...}}", {"type": "object"})},
            )
        },
        "/events": {
            "get": _op(
                "session and kernel status changes (Server-Sent Events)",
                {
                    "200": {
                        "description": "event: session / data: {session_id, status, kernels, …}",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    }
                },
            )
        },
        "/openapi.json": {
            "get": _op("this document", {"200": _reply("OpenAPI 3.0", {"type": "object"})})
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
            "schemas": _SCHEMAS,
            "securitySchemes": {
                "token": {"type": "apiKey", "in": "header", "name": "Authorization"}
            },
        },
        "security": [{"token": []}],
        "paths": paths,
    }
