"""Kernel tokens: how code in a kernel (``%bai`` in main1) proves which session it runs in.

A token ``bai2.<session id>.<issued ms>.<mac>`` is signed with the store's
secret. The signature only proves the store minted it; whether it still grants
anything is decided against the store on every use: its session exists and has
not ended, and its tokens were not revoked since it was issued. What it grants
(its own session, the sessions it created, the owner's templates) is the
kernel-access listener's rule; this module keeps the records it needs.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from ...errors import Forbidden
from ...model import Session
from ...store import AmbiguousKey, Transaction
from ..core import Core

__all__ = ["KernelTokens", "TokenSigner"]

_PREFIX = "bai2."


class TokenSigner:
    """``bai2.<session id>.<issued ms>.<mac>``: signs and reads tokens with one secret."""

    def __init__(self, secret: str) -> None:
        self._key = secret.encode()

    def _mac(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()

    def mint(self, session_id: str, issued_ms: int | None = None) -> str:
        issued = int(time.time() * 1000) if issued_ms is None else issued_ms
        body = f"{session_id}.{issued}"
        return f"{_PREFIX}{body}.{self._mac(body)}"

    def parse(self, token: str | None) -> tuple[str, int] | None:
        """``(session id, issued ms)`` of a well-signed token; ``None`` for anything else."""
        if not token or not token.startswith(_PREFIX):
            return None
        body, _, mac = token[len(_PREFIX) :].rpartition(".")
        session_id, _, issued = body.rpartition(".")
        if not session_id or not issued.isdigit():
            return None
        if not hmac.compare_digest(mac, self._mac(body)):
            return None
        return session_id, int(issued)


class KernelTokens:
    """Mints and checks sessions' kernel tokens; keeps revocations and who created what."""

    def __init__(self, core: Core) -> None:
        self.core = core

    @property
    def signer(self) -> TokenSigner:
        """Signs with the store's secret (the store is open once the manager started)."""
        return TokenSigner(self.core.require_store().token_secret)

    def mint(self, session_id: str) -> str:
        return self.signer.mint(session_id)

    async def session_of(self, token: str | None) -> Session | None:
        """The live session a token grants; ``None`` for what is no kernel token at all.

        Forbidden (saying why) for a kernel token that no longer grants anything."""
        parsed = self.signer.parse(token)
        if parsed is None:
            return None
        session_id, issued = parsed

        def lookup(tx: Transaction) -> tuple[Session | None, int | None]:
            return tx.get_session(session_id), tx.tokens_revoked_at(session_id)

        session, revoked = await self.core.query(lookup)
        if session is None or session.id != session_id:
            raise Forbidden(f"this kernel token's session {session_id} does not exist")
        if session.status.is_terminal:
            raise Forbidden(
                f"this kernel token's session {session_id} has ended ({session.status.value})"
            )
        if revoked is not None and issued <= revoked:
            raise Forbidden(f"this kernel token of session {session_id} was revoked")
        return session

    async def revoke(self, session_id: str) -> float:
        """Tokens of the session issued until now stop working (kept across restarts, until
        the session's record is deleted)."""
        at = int(time.time() * 1000)
        await self.core.db(lambda tx: tx.revoke_tokens(session_id, at))
        return at / 1000

    async def note_child(self, session_id: str, parent_id: str) -> None:
        """``session_id`` was created with a kernel token of ``parent_id``: it may manage it."""
        at = int(time.time() * 1000)
        await self.core.db(lambda tx: tx.note_token_created(parent_id, "session", session_id, at))

    async def note_endpoint(self, endpoint_id: str, parent_id: str) -> None:
        """Endpoint ``endpoint_id`` was created with a kernel token of ``parent_id``."""
        at = int(time.time() * 1000)
        await self.core.db(lambda tx: tx.note_token_created(parent_id, "endpoint", endpoint_id, at))

    async def grants(self, key: str, session: Session) -> bool:
        """Does ``session``'s token grant the session ``key``: its own, or one it created?

        ``key`` is resolved exactly as the handlers resolve it (``get_session`` among the
        owner's, by :func:`~bai_jupyter.model.is_id_key`), and the session it resolves to
        is checked, so a name can never stand for another session's id."""

        def check(tx: Transaction) -> bool:
            try:
                found = tx.get_session(key, session.owner)
            except AmbiguousKey:
                return False  # the handler says why; a token grants one session, named
            if found is None:
                return False
            return found.id == session.id or tx.token_created(session.id, "session", found.id)

        return await self.core.query(check)

    async def grants_endpoint(self, name: str, session: Session) -> bool:
        """Does ``session``'s token grant endpoint ``name``: one of its owner's it created?"""

        def check(tx: Transaction) -> bool:
            found = tx.get_endpoint(name)
            if found is None or found.owner != session.owner:
                return False
            return tx.token_created(session.id, "endpoint", found.id)

        return await self.core.query(check)
