"""Kernel tokens' records in one transaction, kept with the token's session.

What a session's kernel tokens created (sessions, endpoints) and when they were last
revoked; the rows go when the session's record is deleted (``delete_sessions``), a
created session's or endpoint's row when that one is deleted."""

from __future__ import annotations

from typing import Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .tables import endpoints_table, kernel_tokens_table, sessions_table

_TOKENS = kernel_tokens_table.c

#: What a kernel token creates that it may manage afterwards.
Created = Literal["session", "endpoint"]


class KernelTokenRecords:
    """Revocations of sessions' kernel tokens, and what each session's tokens created."""

    conn: Connection

    def _session_exists(self, session_id: str) -> bool:
        query = sa.select(sessions_table.c.id).where(sessions_table.c.id == session_id)
        return self.conn.execute(query).first() is not None

    def tokens_revoked_at(self, session_id: str) -> int | None:
        """Until when (ms) ``session_id``'s kernel tokens were revoked; ``None``: never."""
        row = self.conn.execute(
            sa.select(_TOKENS.at).where(
                _TOKENS.session_id == session_id, _TOKENS.kind == "revoked", _TOKENS.target == ""
            )
        ).first()
        return None if row is None or row.at is None else int(row.at)

    def revoke_tokens(self, session_id: str, until_ms: int) -> None:
        """``session_id``'s kernel tokens issued until ``until_ms`` stop working.

        A session whose record is gone has nothing to revoke (its tokens grant nothing)."""
        if not self._session_exists(session_id):
            return
        mine = (_TOKENS.session_id == session_id, _TOKENS.kind == "revoked", _TOKENS.target == "")
        done = self.conn.execute(sa.update(kernel_tokens_table).where(*mine).values(at=until_ms))
        if not done.rowcount:
            row = {"session_id": session_id, "kind": "revoked", "target": "", "at": until_ms}
            self.conn.execute(sa.insert(kernel_tokens_table), [row])

    def note_token_created(self, session_id: str, kind: Created, target: str, at_ms: int) -> None:
        """A kernel token of ``session_id`` created the ``kind`` (``"session"`` or
        ``"endpoint"``) ``target``; nothing is noted when either is gone meanwhile."""
        table = sessions_table if kind == "session" else endpoints_table
        target_gone = (
            self.conn.execute(sa.select(table.c.id).where(table.c.id == target)).first() is None
        )
        if target_gone or not self._session_exists(session_id):
            return
        if self.token_created(session_id, kind, target):
            return
        row = {"session_id": session_id, "kind": kind, "target": target, "at": at_ms}
        self.conn.execute(sa.insert(kernel_tokens_table), [row])

    def token_created(self, session_id: str, kind: Created, target: str) -> bool:
        """Did a kernel token of ``session_id`` create the ``kind`` ``target``?"""
        row = self.conn.execute(
            sa.select(_TOKENS.session_id).where(
                _TOKENS.session_id == session_id, _TOKENS.kind == kind, _TOKENS.target == target
            )
        ).first()
        return row is not None
