"""How a key in a URL or a command names a session: by id or by name, one rule everywhere.

Ids are uuid4 hex (32 lowercase hex characters). A key of 8 to 32 lowercase hex
characters is an id, or the unique prefix of one (every view shows 8); anything else
is a name.
A session name may therefore never look like an id, or the authorizer and the
handlers could read one key as two sessions. Reasons a user gives for ending a
session are bounded kebab-case words, as the ones the code writes.
"""

from __future__ import annotations

import re

__all__ = [
    "ID_KEY_RE",
    "ID_LENGTH",
    "MAX_REASON",
    "REASON_RE",
    "is_id_key",
    "reason_problem",
]

#: The length of a whole id (uuid4 hex); a shorter id-like key is a prefix of one.
ID_LENGTH = 32
#: A key that names a session by id or id prefix (use with ``fullmatch``).
ID_KEY_RE = re.compile(r"[0-9a-f]{8,32}")
#: A user-given reason for ending a session (``status_info``): kebab-case words.
REASON_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
MAX_REASON = 64


def is_id_key(key: str) -> bool:
    """Does ``key`` name a session by id (else by name)?"""
    return ID_KEY_RE.fullmatch(key) is not None


def reason_problem(reason: object) -> str | None:
    """What is wrong with a user-given reason, or ``None`` when it is fine."""
    if (
        not isinstance(reason, str)
        or len(reason) > MAX_REASON
        or REASON_RE.fullmatch(reason) is None
    ):
        shown = repr(reason) if len(repr(reason)) <= 80 else repr(reason)[:77] + "..."
        return (
            f"must be a kebab-case word of at most {MAX_REASON} characters "
            f"([a-z0-9]+(-[a-z0-9]+)*, e.g. 'user-requested'), got {shown}"
        )
    return None
