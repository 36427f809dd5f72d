"""Two session managers on one store: a server's and a provisioner's embedded one.

``jupyter execute`` beside a running Jupyter server embeds a second manager on
the same default store. When it starts, it must not judge the sessions the
server's manager is starting right then as interrupted (nor start them again).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import make_manager

from bai_jupyter.kernel_plan import LABEL_SESSION
from bai_jupyter.model import STARTING, Status

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(120)]


async def test_a_second_manager_leaves_a_starting_session_to_the_first(
    tmp_path: Path, store_url: str, kernel_image: str, docker_engine: Any
) -> None:
    """On an SQLite file and on PostgreSQL (a Hub's replicated service)."""
    first, second = (make_manager(tmp_path, "docker", store_url=store_url) for _ in range(2))
    await first.start()
    try:
        session = await first.create({"cluster_size": 3}, "alice")
        # Until the first manager is creating its kernels:
        session = await first.wait_for(session.id, STARTING[1:], timeout=30)
        assert session.status in STARTING[1:]
        await second.start()  # reconciles the store while that start is under way
        session = await first.wait_for(session.id, {Status.RUNNING}, timeout=60)
        assert session.status is Status.RUNNING, (session.status_info, session.status_data)
        assert Status.ERROR not in [h.status for h in session.status_history]
        containers = docker_engine.containers.list(
            filters={"label": f"{LABEL_SESSION}={session.id}"}
        )
        assert len(containers) == 3
        assert (await second.get(session.id)).status is Status.RUNNING
    finally:
        await second.stop()
        for left in await first.list_sessions():
            if not left.status.is_terminal:
                await first.destroy(left.id)
        await first.stop()
