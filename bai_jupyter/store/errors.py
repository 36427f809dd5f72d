"""What the store refuses, and why."""

from __future__ import annotations

__all__ = ["AmbiguousKey", "NameConflict", "StoreError", "StoreVersionError"]


class StoreError(RuntimeError):
    """The store cannot be used as it is; the message says what to do."""


class StoreVersionError(StoreError):
    """The store was written by a bai-jupyter with another schema version."""


class NameConflict(StoreError):
    """A name taken: by a live session of the same owner, or by any endpoint."""


class AmbiguousKey(StoreError):
    """A short id (a prefix) that more than one session's id begins with."""

    def __init__(self, key: str, ids: list[str], more: bool) -> None:
        shown = ", ".join(ids) + (", …" if more else "")
        super().__init__(
            f"session key {key!r} is ambiguous: it begins the ids {shown}; give more of the id"
        )
