"""Links ``%bai`` prints in main1 (``ports``, ``status``) are the server's public ones, not
the kernel listener's.

In a kernel ``BAI_JUPYTER_URL`` is the kernel-access listener (reachable from
containers only, with a kernel token): a person who opens a link built on it
gets nowhere. The server gives kernels its public URL as ``BAI_JUPYTER_PUBLIC_URL``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator

import pytest
from harness.server import Server, serving

from bai_jupyter.model import Status

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(300)]

#: Run in main1: serve the work dir on the service port, then a ``%bai`` command.
_CODE = """
import json, os, subprocess, sys, time, urllib.request
subprocess.Popen([sys.executable, "-m", "http.server", "8080"], stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
open("hello.txt", "w").write("hello from main1")
get_ipython().run_line_magic("load_ext", "bai_jupyter")
print(json.dumps({{"kernel_url": os.environ["BAI_JUPYTER_URL"]}}))
get_ipython().run_line_magic("bai", {command!r})
"""


@pytest.fixture(scope="module")
def server(kernel_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("bai-links")) as running:
        yield running


async def _printed(server: Server, session_id: str, code: str) -> str:
    client = server.client()
    reply = await client.execute(session_id, code=code)
    console = list(reply["console"])
    while reply["status"] == "continued":
        reply = await client.execute(session_id, mode="continue", run_id=reply["run_id"])
        console += reply["console"]
    assert reply["exit_code"] == 0, reply
    return "".join(item[1] for item in console if item[0] == "stdout")


# ``status`` as text: the plain view a terminal-like front end gets (its widget view links
# to the server's path, relative to the page).
@pytest.mark.parametrize("command", ["ports", "status --text"])
async def test_bai_commands_in_main1_link_through_the_server(server: Server, command: str) -> None:
    client = server.client()
    session = await client.create(
        {"resources": {"cpu": "0.5", "mem": "256m"}, "service_ports": ["web:http:8080"]}
    )
    try:
        ready = await client.wait_for(session.id, {Status.RUNNING}, timeout=120)
        assert ready.status is Status.RUNNING, ready.status_data
        printed = await _printed(server, session.id, _CODE.format(command=command))
        kernel_url = json.loads(printed.splitlines()[0])["kernel_url"]
        match = re.search(r"(http://\S+/proxy/web/)", printed)
        assert match, printed
        link = match.group(1)
        assert link.startswith(server.url), (link, server.url)
        assert not link.startswith(kernel_url), (link, kernel_url)
        # The link answers through the server with the user's own token.
        path = link[len(server.url) :] + "hello.txt"
        for _ in range(60):  # until http.server in main1 listens
            reply = await server.fetch("GET", path)
            if reply.code != 502:
                break
            await asyncio.sleep(1)
        assert reply.code == 200 and reply.body == b"hello from main1", (reply.code, reply.body)
    finally:
        await client.destroy(session.id)
