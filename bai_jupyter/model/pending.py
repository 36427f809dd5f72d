"""Why a pending session waits: one sentence, built once from the scheduler's record.

The scheduler keeps ``status_data["scheduler"]`` (``failed_predicates``, ``msg``,
``retries`` …) on a session it could not place. :func:`pending_reason` turns that
record into the sentence every front end shows (the API's ``pending_reason``: the
provisioner's waiting message, ``%bai``'s tables and widgets, the JupyterLab
sidebar and status bar), so they say the same words.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["REASON_SEPARATOR", "name_sessions", "pending_reason"]

#: Between two reasons of the sentence (the scheduler's ``msg`` joins verdicts with it too).
REASON_SEPARATOR = "; "


#: A session id in a reason, and the status the pass that wrote it saw (if it says one).
_SESSION_ID = re.compile(r"\b([0-9a-f]{32})\b(?: \(([A-Z_]+)\))?")


def name_sessions(text: str, known: Callable[[str], tuple[str, str] | None]) -> str:
    """``text`` with each session id read as people know the session: ``session train-1
    (RUNNING)``, its name (else its short id) and its status *now* (``known``: id →
    (label, status), None when the reader may not see it: the short id, no status).

    The scheduler writes ids and the statuses of its pass; a reader resolves them when it
    makes its view, so the sentence is current however long ago the pass ran."""

    def named(match: re.Match[str]) -> str:
        found = known(match.group(1))
        if found is None:
            return f"session {match.group(1)[:8]}"
        label, status = found
        return f"session {label} ({status})" if match.group(2) else f"session {label}"

    return _SESSION_ID.sub(named, text)


def pending_reason(record: Mapping[str, Any] | None) -> str | None:
    """The scheduler's reasons a session waits (or waited), each said once, in order.

    The failed predicates' messages (a predicate's name when it has none) come first,
    then the record's ``msg``; each is cut at ``"; "`` into reasons, and a reason said
    before is left out (the scheduler's ``msg`` often repeats its predicates', joined).
    ``retries`` is not part of it: the sentence stays the same from pass to pass while
    the reasons do. None when the record says nothing (the scheduler has not tried yet).
    """
    if not record:
        return None
    texts = [
        str(p.get("msg") or p.get("name") or "") if isinstance(p, Mapping) else str(p)
        for p in record.get("failed_predicates") or []
    ]
    texts.append(str(record.get("msg") or ""))
    reasons = (part.strip() for text in texts for part in text.split(REASON_SEPARATOR))
    unique = dict.fromkeys(reason for reason in reasons if reason)
    return REASON_SEPARATOR.join(unique) or None
