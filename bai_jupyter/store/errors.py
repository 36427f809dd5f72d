"""What the store refuses, and why."""

from __future__ import annotations

__all__ = ["NameConflict", "StoreError", "StoreVersionError"]


class StoreError(RuntimeError):
    """The store cannot be used as it is; the message says what to do."""


class StoreVersionError(StoreError):
    """The store was written by a bai-jupyter with another schema version."""


class NameConflict(StoreError):
    """A name taken: by a live session of the same owner, or by any endpoint."""
