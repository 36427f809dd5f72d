"""Reads and writes inside one store transaction: one class, its parts by record kind."""

from __future__ import annotations

from sqlalchemy.engine import Connection

from .agents import AgentRecords
from .endpoints import EndpointRecords
from .events import EventRecords
from .kernel_tokens import KernelTokenRecords
from .lease import LeaseRecords
from .meta import MetaRecords
from .notes import NoteRecords
from .scheduling import SchedulingRecords
from .sessions import SessionRecords
from .templates import TemplateRecords


class Transaction(
    SessionRecords,
    AgentRecords,
    TemplateRecords,
    EndpointRecords,
    EventRecords,
    KernelTokenRecords,
    MetaRecords,
    SchedulingRecords,
    LeaseRecords,
    NoteRecords,
):
    """Reads and writes inside one transaction; obtained from :meth:`Store.write`/``read``."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        #: Set by every write that may make room or add work; the store then bumps its
        #: change counter (``bai_meta`` ``changes``) as the transaction commits.
        self.changed = False
