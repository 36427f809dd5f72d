"""A PostgreSQL cluster of one test's own, which the test may stop and start again.

The suite's server (``scripts/_postgres.sh``, ``BAI_TEST_POSTGRES_URL``) is shared by
every test; a test that restarts PostgreSQL under running managers gets a cluster of
its own instead, made the same way (Debian's binaries, run as ``postgres``, a Unix
socket only) in a new folder under /tmp.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from conftest import skip_or_fail


def _bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        skip_or_fail("no PostgreSQL binaries (./scripts/test installs Debian's postgresql)")
    return found[-1].parent


def _as_postgres(*args: str) -> None:
    done = subprocess.run(["runuser", "-u", "postgres", "--", *args], capture_output=True)
    assert done.returncode == 0, f"{args}: {done.stdout!r} {done.stderr!r}"


@dataclass
class Postgres:
    """A running cluster in ``folder`` (socket there too, port ``port``)."""

    folder: Path
    port: int = 54330

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@/postgres?host={self.folder}&port={self.port}"

    def database(self, name: str) -> str:
        """Create database ``name`` (the cluster goes with its folder: nothing to drop)."""
        import sqlalchemy as sa

        admin = sa.create_engine(self.url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        finally:
            admin.dispose()
        return sa.make_url(self.url).set(database=name).render_as_string(hide_password=False)

    def start(self) -> None:
        options = f"-k {self.folder} -p {self.port} -c listen_addresses='' -c fsync=off"
        _as_postgres(
            str(_bin() / "pg_ctl"),
            "-D",
            str(self.folder / "data"),
            "-o",
            options + " -c max_connections=200",
            "-l",
            str(self.folder / "server.log"),
            "-w",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """``fast``: connections are closed (a restart); ``immediate``: as a crash."""
        _as_postgres(str(_bin() / "pg_ctl"), "-D", str(self.folder / "data"), "-m", mode, "stop")


def start_postgres() -> Postgres:
    """initdb and start a cluster in a new folder under /tmp (root only: it runs as
    ``postgres``, which cannot enter pytest's private temporary folders)."""
    if os.getuid() != 0 or shutil.which("runuser") is None:
        skip_or_fail("a PostgreSQL cluster of the test's own needs root (to run as postgres)")
    folder = Path(tempfile.mkdtemp(prefix="bai-test-pg-", dir="/tmp"))
    folder.chmod(0o755)
    shutil.chown(folder, "postgres", "postgres")
    _as_postgres(
        str(_bin() / "initdb"), "-D", str(folder / "data"), "-A", "trust", "-U", "postgres"
    )
    pg = Postgres(folder)
    pg.start()
    return pg


@contextlib.contextmanager
def running_postgres() -> Iterator[Postgres]:
    pg = start_postgres()
    try:
        yield pg
    finally:
        with contextlib.suppress(AssertionError):
            pg.stop("immediate")
        shutil.rmtree(pg.folder, ignore_errors=True)
