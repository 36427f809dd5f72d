"""The store's tables (SQLAlchemy Core) and their schema version."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

#: Bump with every change of the tables below, and add the step to
#: :data:`~bai_jupyter.store.migrations.MIGRATIONS`.
SCHEMA_VERSION = 6

metadata = sa.MetaData()


def _session_id(**options: Any) -> sa.Column[Any]:
    """The column of a row that belongs to a session: deleted with the session's row."""
    return sa.Column(
        "session_id",
        sa.String(32),
        sa.ForeignKey("bai_sessions.id", ondelete="CASCADE"),
        **options,
    )


meta_table = sa.Table(
    "bai_meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(256), nullable=False),
)

sessions_table = sa.Table(
    "bai_sessions",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("owner", sa.String(256), nullable=False, index=True),
    sa.Column("name", sa.String(64), nullable=True),
    sa.Column("resource_group", sa.String(64), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("status_info", sa.String(256), nullable=True),
    sa.Column("status_data", sa.JSON, nullable=False),
    sa.Column("result", sa.String(16), nullable=False),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("spec", sa.JSON, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    #: Front ends' facts about the session (e.g. the Jupyter kernel id behind it).
    sa.Column("meta", sa.JSON, nullable=False, default=dict),
    sa.Index("ix_bai_sessions_group_status", "resource_group", "status"),
)

kernels_table = sa.Table(
    "bai_kernels",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    _session_id(nullable=False, index=True),
    sa.Column("role", sa.String(8), nullable=False),
    sa.Column("cluster_idx", sa.Integer, nullable=False),
    sa.Column("hostname", sa.String(64), nullable=False),
    sa.Column("slots", sa.JSON, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("status_info", sa.String(256), nullable=True),
    sa.Column("agent_id", sa.String(128), nullable=True, index=True),
    sa.Column("container_id", sa.String(128), nullable=True),
    #: Where the kernel can be reached (host, ports, connection info), set when it starts.
    sa.Column("info", sa.JSON, nullable=False, default=dict),
    #: The kernel's output, kept when its container is removed (batch logs after the end).
    sa.Column("logs", sa.Text, nullable=True),
)

agents_table = sa.Table(
    "bai_agents",
    metadata,
    sa.Column("id", sa.String(128), primary_key=True),
    sa.Column("resource_group", sa.String(64), nullable=False, index=True),
    sa.Column("backend", sa.String(16), nullable=False),
    sa.Column("address", sa.String(512), nullable=True),
    sa.Column("capacity", sa.JSON, nullable=False),
    sa.Column("occupied", sa.JSON, nullable=False),
    sa.Column("schedulable", sa.Boolean, nullable=False),
)

templates_table = sa.Table(
    "bai_templates",
    metadata,
    sa.Column("owner", sa.String(256), primary_key=True),  # "" = shared by everyone
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("spec", sa.JSON, nullable=False),
)

history_table = sa.Table(
    "bai_status_history",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    _session_id(nullable=False, index=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("info", sa.String(256), nullable=True),
)

#: What the store knows of each owner: the user groups they are in (a JupyterHub's), as
#: they were when they last created a session (for group policies and group fair share).
owners_table = sa.Table(
    "bai_owners",
    metadata,
    sa.Column("owner", sa.String(256), primary_key=True),
    sa.Column("groups", sa.JSON, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)

#: Inference endpoints: the name is unique in the store (it is the endpoint's URL).
endpoints_table = sa.Table(
    "bai_endpoints",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(64), nullable=False, unique=True),
    sa.Column("owner", sa.String(256), nullable=False, index=True),
    #: The whole record (``bai_jupyter.endpoints.Endpoint.to_json``).
    sa.Column("data", sa.JSON, nullable=False),
)

#: What sessions' kernel tokens did, and what was done to them, kept with the token's
#: session (``session_id``) and deleted with it: ``kind`` ``"session"`` or ``"endpoint"``:
#: the token created the session or endpoint ``target``; ``"revoked"`` (``target`` empty):
#: the session's tokens issued until ``at`` were revoked. ``at``: ms since the epoch (when it
#: was recorded; unknown for what was created before this table existed).
kernel_tokens_table = sa.Table(
    "bai_kernel_tokens",
    metadata,
    _session_id(primary_key=True),
    sa.Column("kind", sa.String(16), primary_key=True),
    sa.Column("target", sa.String(64), primary_key=True),
    sa.Column("at", sa.BigInteger, nullable=True),
    sa.Index("ix_bai_kernel_tokens_target", "kind", "target"),
)

#: The change log: one row per change of a session, written in the change's own
#: transaction (``store.events``). Write transactions are serialized (see
#: ``Store.write``), so ``seq`` grows in commit order and a reader that has seen up to
#: ``seq`` N never misses a later row. No foreign key: a purged session's events stay
#: until pruned, as a stream's reader may not have read them yet.
events_table = sa.Table(
    "bai_events",
    metadata,
    sa.Column(
        "seq",
        sa.BigInteger().with_variant(sa.Integer, "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    sa.Column("at", sa.Float, nullable=False, index=True),
    sa.Column("session_id", sa.String(32), nullable=False, index=True),
    #: The event as the stream carries it (``model.session_event``).
    sa.Column("data", sa.JSON, nullable=False),
    # Never a seq again once pruned (SQLite reuses the highest rowid otherwise): a
    # reader resuming after it would miss every new event.
    sqlite_autoincrement=True,
)

#: Leases: ``name`` (``"leader"``: who runs the scheduler and the watchdogs) is held by
#: ``holder`` until ``expires`` (epoch seconds by the store's clock) unless renewed;
#: ``epoch`` grows with each change of holder, ``since``: when this holder took it.
leases_table = sa.Table(
    "bai_leases",
    metadata,
    sa.Column("name", sa.String(32), primary_key=True),
    sa.Column("holder", sa.String(256), nullable=False),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("expires", sa.Float, nullable=False),
    sa.Column("since", sa.Float, nullable=False),
)

#: The last heartbeat of each remote Jupyter server (per owner: one user cannot keep
#: another's server alive), written by whichever manager replica received it.
servers_table = sa.Table(
    "bai_servers",
    metadata,
    sa.Column("owner", sa.String(256), primary_key=True),
    sa.Column("server", sa.String(64), primary_key=True),
    sa.Column("seen", sa.Float, nullable=False, index=True),
)

#: The last use of each session that a manager process saw (the API, the proxy, exec),
#: written by every process so that the leader's idle watch counts it.
activity_table = sa.Table(
    "bai_activity",
    metadata,
    _session_id(primary_key=True),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("source", sa.String(32), nullable=False),
)
