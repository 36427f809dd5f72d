"""Sessions, clusters, service ports and tables as plain text: what ``bai-jupyter`` and
``%bai`` print (no I/O but the environment a kernel reads)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .client import RemoteManager
from .sessions_model import SessionRow, kernels_summary, resources_text

__all__ = [
    "cluster_text",
    "counts_text",
    "duration_text",
    "env_cluster_text",
    "format_table",
    "idle_text",
    "ports_text",
    "runs_in_containers",
    "service_url",
    "sessions_table",
]


def format_table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(wd) for c, wd in zip(cells, widths)).rstrip()

    return "\n".join(line(r) for r in [headers, *rows])


def sessions_table(rows: list[SessionRow]) -> str:
    """The sessions view as text: state, queue position, why pending, kernel states."""
    if not rows:
        return "no sessions"
    return format_table(
        ("SESSION", "TYPE", "STATUS", "QUEUE", "KERNELS", "RESOURCES", "WHY PENDING"),
        [
            (
                r.label,
                r.type,
                r.outcome if r.ended else r.status,
                str(r.queue_position or ""),
                kernels_summary(r.kernels),
                r.resources,
                r.why_pending or "",
            )
            for r in rows
        ],
    )


def service_url(remote: RemoteManager, path: str | None) -> str:
    """A service's proxy URL for a person to open (the API gives a server path).

    In a kernel, ``BAI_JUPYTER_URL`` is the kernel-access listener, which no browser
    reaches: the server gives kernels its public URL as ``BAI_JUPYTER_PUBLIC_URL``.
    """
    if not path:
        return "(tcp: not proxied)"
    base = os.environ.get("BAI_JUPYTER_PUBLIC_URL") or remote.url
    if path.startswith("/"):  # the server's absolute path (its base_url included)
        return urlunsplit(urlsplit(base)._replace(path=path, query="", fragment=""))
    return base.rstrip("/") + "/" + path


def ports_text(remote: RemoteManager, session: Mapping[str, Any]) -> str:
    services = session.get("services") or []
    if not services:
        return f"session {session['id'][:8]} has no service ports"
    return format_table(
        ("SERVICE", "PROTOCOL", "PORT", "URL"),
        [
            (s["name"], s["protocol"], str(s["port"]), service_url(remote, s.get("url")))
            for s in services
        ],
    )


def runs_in_containers(session: Mapping[str, Any], agents: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the session's kernels run in containers (an image means something), from
    the agents of its resource group (``GET agents``); local processes have no image."""
    group = (session.get("spec") or {}).get("resource_group")
    backends = {a.get("backend") for a in agents if a.get("resource_group") in (group, None)}
    return not backends or backends != {"local"}


def counts_text(rows: Sequence[SessionRow]) -> str:
    """``2 live session(s), 1 pending``: the line over the sessions in ``%bai status``."""
    pending = sum(r.phase == "queued" for r in rows)
    return f"{len(rows)} live session(s), {pending} pending"


def cluster_text(remote: RemoteManager, session: Mapping[str, Any], containers: bool = True) -> str:
    """One session in full: state, each kernel with role and resources, service ports
    (``containers``: whether it runs in containers, so its image is worth saying)."""
    row = SessionRow.from_json(session)
    spec = session.get("spec") or {}
    head = (
        f"session {row.id} {('(' + row.name + ') ') if row.name else ''}· {row.type} · "
        f"{row.outcome if row.ended else row.status} · {spec.get('cluster_mode')}"
        + (f" · image {row.image}" if containers and row.image else "")
    )
    if row.why_pending:
        head += f"\nqueued #{row.queue_position or '?'}: {row.why_pending}"
    idle = idle_text(session.get("idle") or {})
    if idle:
        head += f"\n{idle}"
    sftp = session.get("sftp")
    if sftp:
        head += f"\nsftp: {sftp['command']} (the key: GET sessions/{row.id}?connection=true)"
    kernels = format_table(
        ("HOST", "ROLE", "STATUS", "RESOURCES"),
        [
            (k["hostname"], k["role"], k["status"], resources_text(k["slots"]))
            for k in session.get("kernels") or []
        ],
    )
    return f"{head}\n\n{kernels}\n\n{ports_text(remote, session)}"


def duration_text(seconds: float) -> str:
    """``45 s``, ``9 min 58 s``, ``3 h 5 min``, ``2 d 4 h``: the two largest units."""
    left = max(0, round(seconds))
    units = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))
    parts: list[str] = []
    for name, size in units:
        if left >= size or (name == "s" and not parts):
            parts.append(f"{left // size} {name}")
            left %= size
        if len(parts) == 2 or (parts and left == 0):
            break
    return " ".join(parts)


def idle_text(idle: Mapping[str, Any]) -> str | None:
    """When each idle rule ends the session if nothing happens: ``ends when idle for 9 min
    58 s more (idle_timeout 10 min) · in 23 h 59 min at most (session_lifetime 1 d)``."""
    parts: list[str] = []
    rule = idle.get("idle_timeout")
    if rule and rule.get("left") is not None:
        parts.append(
            f"idle for {duration_text(rule['left'])} more ends it "
            f"(idle_timeout {duration_text(rule['timeout'])})"
        )
    rule = idle.get("utilization")
    if rule and rule.get("left") is not None:
        parts.append(
            f"CPU below {rule['cpu_percent']:g} % ends it in {duration_text(rule['left'])} "
            f"(now {rule.get('cpu_used', 0):g} % over {duration_text(rule['window'])})"
        )
    rule = idle.get("session_lifetime")
    if rule and rule.get("left") is not None:
        parts.append(
            f"ends in {duration_text(rule['left'])} at most "
            f"(session_lifetime {duration_text(rule['timeout'])})"
        )
    return "idle rules: " + " · ".join(parts) if parts else None


def env_cluster_text() -> str:
    """What this kernel knows of its cluster without the manager."""
    env = os.environ
    return (
        f"session {env.get('BACKENDAI_SESSION_ID')} · this kernel: "
        f"{env.get('BACKENDAI_CLUSTER_HOST')} · hosts: {env.get('BACKENDAI_CLUSTER_HOSTS')} · "
        f"{env.get('BACKENDAI_CLUSTER_MODE')}"
    )
