"""Why a pending session waits: one sentence, built once from the scheduler's record.

The scheduler keeps ``status_data["scheduler"]`` (``failed_predicates``, ``msg``,
``retries`` …) on a session it could not place. :func:`pending_reason` turns that
record into the sentence every front end shows (the API's ``pending_reason``: the
provisioner's waiting message, ``%bai``'s tables and widgets, the JupyterLab
sidebar and status bar), so they say the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["REASON_SEPARATOR", "pending_reason"]

#: Between two reasons of the sentence (the scheduler's ``msg`` joins verdicts with it too).
REASON_SEPARATOR = "; "


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
