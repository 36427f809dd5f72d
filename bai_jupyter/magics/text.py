"""How ``%bai`` shows sessions, clusters and service ports as text (no I/O)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..client import RemoteManager
from ..sessions_model import SessionRow, kernels_summary, resources_text
from ..text import format_table


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


def cluster_text(remote: RemoteManager, session: Mapping[str, Any]) -> str:
    """One session in full: state, each kernel with role and resources, service ports."""
    row = SessionRow.from_json(session)
    spec = session.get("spec") or {}
    head = (
        f"session {row.id} {('(' + row.name + ') ') if row.name else ''}· {row.type} · "
        f"{row.outcome if row.ended else row.status} · {spec.get('cluster_mode')} · "
        f"image {row.image}"
    )
    if row.why_pending:
        head += f"\nqueued #{row.queue_position or '?'}: {row.why_pending}"
    kernels = format_table(
        ("HOST", "ROLE", "STATUS", "RESOURCES"),
        [
            (k["hostname"], k["role"], k["status"], resources_text(k["slots"]))
            for k in session.get("kernels") or []
        ],
    )
    return f"{head}\n\n{kernels}\n\n{ports_text(remote, session)}"


def env_cluster_text() -> str:
    """What this kernel knows of its cluster without the manager."""
    env = os.environ
    return (
        f"session {env.get('BACKENDAI_SESSION_ID')} · this kernel: "
        f"{env.get('BACKENDAI_CLUSTER_HOST')} · hosts: {env.get('BACKENDAI_CLUSTER_HOSTS')} · "
        f"{env.get('BACKENDAI_CLUSTER_MODE')}"
    )
