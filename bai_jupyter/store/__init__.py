"""Persistence of sessions, kernels, agents, templates and status history.

SQLAlchemy 2 Core on any URL; by default a SQLite file in the Jupyter data
directory. Every change goes through a write transaction (:meth:`Store.write`):
on SQLite it is ``BEGIN IMMEDIATE``, elsewhere the first statement locks the
schema row (``SELECT … FOR UPDATE``). So a scheduling pass that loads a
snapshot, decides and reserves slots is serialized against every other writer,
in this process or another, and no slot is ever given out twice.

The store is synchronous; async callers run it through ``asyncio.to_thread``.
"""

from __future__ import annotations

from .errors import AmbiguousKey, NameConflict, StoreError, StoreVersionError
from .store import Store, default_url
from .tables import SCHEMA_VERSION
from .transaction import Transaction

__all__ = [
    "SCHEMA_VERSION",
    "AmbiguousKey",
    "NameConflict",
    "Store",
    "StoreError",
    "StoreVersionError",
    "Transaction",
    "default_url",
]
