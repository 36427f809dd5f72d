"""How the command line and ``%bai`` show endpoints (as the API gives them) in plain text."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..text import format_table

__all__ = ["endpoint_text", "endpoints_table"]


def endpoints_table(views: Sequence[Mapping[str, Any]]) -> str:
    """One line per endpoint: its state and replicas."""
    if not views:
        return "no endpoints (create one: bai-jupyter endpoint create, or the REST API)"
    return format_table(
        ("ENDPOINT", "STATE", "READY", "WANTED", "GEN", "OWNER"),
        [
            (v["name"], v["state"], str(v["ready_replicas"]), str(v["desired"]),
             str(v["generation"]), v["owner"])
            for v in views
        ],
    )  # fmt: skip


def endpoint_text(view: Mapping[str, Any], url: str) -> str:
    """An endpoint in a few lines: where, how many, how loaded, the latest decisions."""
    scaling = view["spec"]["scaling"]
    load = view.get("load", {})
    lines = [
        f"endpoint {view['name']} ({view.get('state', '?')}), owner {view['owner']}",
        f"  url         {url}",
        f"  replicas    {view.get('ready_replicas', 0)} ready of {view['desired']} wanted "
        f"({scaling['min_replicas']} to {scaling['max_replicas']}), "
        f"generation {view['generation']}",
        f"  scaling     {scaling['metric']} target {scaling['target']:g} per replica over "
        f"{scaling['window']:g} s; now {load.get('in_flight', 0):g} in flight, "
        f"{load.get('rps', 0):g} requests/s",
    ]
    rollout = view.get("rollout") or {}
    if rollout.get("state") == "rolling":
        lines.append(f"  rollout     to generation {rollout['generation']} from {rollout['from']}")
    elif rollout.get("state") == "failed":
        lines.append(f"  rollout     failed: {rollout['reason']}")
    if view.get("error"):
        lines.append(f"  trouble     {view['error']}")
    for replica in view.get("replicas", []):
        state = "draining" if replica.get("draining") else (
            "healthy" if replica.get("healthy") else replica.get("problem") or "not ready"
        )  # fmt: skip
        lines.append(
            f"  - {replica['session_id'][:12]}  {replica['status']:<10} gen "
            f"{replica['generation']}  {state}"
        )
    for decision in view.get("decisions", [])[-5:]:
        when = time.strftime("%H:%M:%S", time.localtime(decision["at"]))
        lines.append(f"  {when}  {decision['from']} → {decision['to']}: {decision['reason']}")
    return "\n".join(lines)
