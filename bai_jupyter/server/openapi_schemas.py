"""The OpenAPI description's building blocks: the request and session schemas, and helpers."""

from __future__ import annotations

from typing import Any

from ..endpoints import METRICS
from ..endpoints.spec import MAX_REPLICAS
from ..model import ID_KEY_RE, ClusterMode, SessionType, Status
from ..request import FIELDS, NAME_RE
from ..request.bounds import (
    MAX_BATCH_TIMEOUT,
    MAX_CLUSTER_SIZE,
    MAX_COMMAND,
    MAX_DEPENDS_ON,
    MAX_ENV,
    MAX_MOUNTS,
    MAX_PRIORITY,
    MAX_PUBLIC_KEY,
    MAX_SERVICE_PORTS,
    MAX_TIMESTAMP,
)
from ..request.roles import MAX_ROLES, ROLE_NAME_RE
from .kernel_runs import MODES


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def reply(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description, **(json_content(schema) if schema else {})}


ERRORS = {
    "400": reply(
        "invalid input: the message says what to fix, field names the field", ref("Error")
    ),
    "403": reply("not authenticated, or not authorized for this resource", ref("Error")),
    "404": reply("no such session (of yours), template or kernel", ref("Error")),
    "409": reply("name taken, or the session is in the wrong state", ref("Error")),
    "413": reply("the body is over BaiJupyterApp.max_body_size", ref("Error")),
    "503": reply("not ready (session not RUNNING, manager not started); retry", ref("Error")),
}

NULLABLE_STRING = {"type": "string", "nullable": True}
FIELD_SCHEMAS: dict[str, dict[str, Any]] = {
    "image": NULLABLE_STRING,
    "name": {  # never id-like: such a key reads as an id (model.is_id_key)
        "type": "string",
        "pattern": f"^(?!{ID_KEY_RE.pattern}$){NAME_RE.pattern}$",
        "nullable": True,
    },
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
    "resource_group": NULLABLE_STRING,
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
    "roles": {
        "type": "array",
        "maxItems": MAX_ROLES,
        "nullable": True,
        "items": {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "pattern": f"^{ROLE_NAME_RE.pattern}$"},
                "replicas": {"type": "integer", "minimum": 1, "maximum": MAX_CLUSTER_SIZE},
                "image": NULLABLE_STRING,
                "resources": {
                    "type": "object",
                    "nullable": True,
                    "additionalProperties": {"oneOf": [{"type": "string"}, {"type": "number"}]},
                },
                "env": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "nullable": True,
                },
                "mounts": {"type": "array", "items": {"type": "string"}, "nullable": True},
            },
        },
    },
    "ssh_public_key": {"type": "string", "maxLength": MAX_PUBLIC_KEY, "nullable": True},
}
assert set(FIELD_SCHEMAS) == set(FIELDS), "the OpenAPI request schema drifted from FIELDS"


def spec_fields() -> dict[str, Any]:
    return {
        name: {**schema, "description": FIELDS[name].help} for name, schema in FIELD_SCHEMAS.items()
    }


SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error", "message"],
        "properties": {
            "error": {"type": "string", "description": "stable code, e.g. invalid-request"},
            "message": {"type": "string", "description": "what is wrong and what to do"},
            "field": {
                "type": "string",
                "description": "the request field the error is about, as a dotted path "
                "(resources.cpu, mounts, roles[1].image, name); absent: the request as a whole",
            },
        },
    },
    "SessionRequest": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            **spec_fields(),
            "template": {
                "type": "string",
                "nullable": True,
                "description": "name of a template whose fields this request overrides",
            },
            "meta": {
                "type": "object",
                "nullable": True,
                "description": "front ends' facts; notebook_folder (a folder of the file "
                "browser, '' its root) asks for the notebooks mounted and the kernels "
                "started there, recorded as notebook_dir (the new-session dialog's)",
            },
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
            "pending_reason": {
                "type": "string",
                "nullable": True,
                "description": "why it waits (or waited, if cancelled in the queue): the "
                "scheduler's reasons from status_data.scheduler, each once, joined by '; '; "
                "null when the scheduler has not said why",
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
            "idle": {
                "type": "object",
                "description": "while running: each idle rule that applies (idle_timeout, "
                "session_lifetime, utilization) with its settings, source and the seconds "
                "left before it ends the session if nothing happens; plus last_activity "
                "(epoch s) and activity (what used it last)",
                "additionalProperties": True,
            },
            "sftp": {
                "type": "object",
                "nullable": True,
                "description": "a running system session's SFTP server: host, port, user, "
                "known_hosts, command, rsync (the rsync command line, where the image has "
                "rsync); private_key with connection=true (null: none)",
            },
            "end_notice": {
                "type": "string",
                "nullable": True,
                "description": "once someone ended it on purpose (not a death): who, why, "
                "and that its notebook kernel does not restart, as a notebook says it; "
                "null otherwise",
            },
        },
    },
    "EndpointRequest": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "pattern": f"^{NAME_RE.pattern}$"},
            "replica": {
                "type": "object",
                "properties": spec_fields(),
                "additionalProperties": False,
                "description": "the session request of each replica (type inference)",
            },
            "service": {"type": "string", "description": "the replicas' HTTP service port"},
            "health_path": {"type": "string", "description": "GET here answers 2xx/3xx"},
            "health_interval": {"type": "number", "minimum": 0.5, "maximum": 300},
            "scaling": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "min_replicas": {"type": "integer", "minimum": 1, "maximum": MAX_REPLICAS},
                    "max_replicas": {"type": "integer", "minimum": 1, "maximum": MAX_REPLICAS},
                    "metric": {"type": "string", "enum": list(METRICS)},
                    "target": {"type": "number", "minimum": 0.01, "maximum": 1e6},
                    "window": {"type": "number", "minimum": 1, "maximum": 3600},
                },
            },
        },
    },
    "Endpoint": {
        "type": "object",
        "required": [
            "id",
            "name",
            "owner",
            "created_at",
            "spec",
            "generation",
            "desired",
            "replicas",
        ],
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "owner": {"type": "string"},
            "created_at": {"type": "number"},
            "url": {"type": "string", "description": "its route, under the server's base URL"},
            "spec": {"type": "object"},
            "generation": {"type": "integer"},
            "desired": {"type": "integer", "description": "replicas the scaling rule wants"},
            "state": {"type": "string", "enum": ["ready", "queued", "starting"]},
            "ready_replicas": {"type": "integer"},
            "replicas": {"type": "array", "items": {"type": "object"}},
            "load": {"type": "object"},
            "decisions": {"type": "array", "items": {"type": "object"}},
            "rollout": {
                "type": "object",
                "nullable": True,
                "description": "the last rolling update, until one completes: state "
                "(rolling, failed), generation, from, since, at, reason (why it gave up)",
            },
            "error": {"type": "string", "nullable": True},
        },
    },
    "Template": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "pattern": f"^{NAME_RE.pattern}$"},
            "spec": {"type": "object", "properties": spec_fields(), "additionalProperties": False},
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


def path_param(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
        "description": description,
    }


def query_param(name: str, description: str, **schema: Any) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": {"type": "string", **schema},
        "description": description,
    }


def operation(summary: str, ok: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"summary": summary, "responses": {**ok, **ERRORS}, **extra}
