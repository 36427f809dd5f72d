"""Handing a claimed warm session's kernel to its user: the notebook's folder.

A warm session's ipykernel started in the notebooks' root; a cold start would
have started it in the claiming notebook's own folder. One silent execute on
main1's shell channel (no output, no history, no execution count, nothing left
in the user's namespace) moves it there and writes ``CLAIM_FILE``, from which
the runtime starts a restarted ipykernel in the same folder. Sub kernels keep
the root as their working directory (only ``%%bai exec`` commands see it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.session import Session as JupyterSession

from ...runtime.protocol import CLAIM_FILE

__all__ = ["HandoverError", "hand_over"]


class HandoverError(RuntimeError):
    """The kernel did not take the claim (it died, or did not answer in time)."""


def claim_code(relative: str) -> str:
    """What the kernel runs, in a namespace of its own: change to ``relative`` (from the
    notebooks' root, where it started) and record where that is in ``CLAIM_FILE``, beside
    its connection file (the runtime's config dir, on every backend)."""
    body = (
        "import json, os\n"
        "from ipykernel.kernelapp import IPKernelApp\n"
        f"os.chdir({relative!r})\n"
        "config = os.path.dirname(os.path.abspath(IPKernelApp.instance().connection_file))\n"
        f"with open(os.path.join(config, {CLAIM_FILE!r}), 'w') as f:\n"
        "    json.dump({'work_dir': os.getcwd()}, f)\n"
    )
    return f"exec({body!r}, {{}})"


async def hand_over(connection: Mapping[str, Any], relative: str, timeout: float = 10.0) -> None:
    """Run :func:`claim_code` in the ipykernel of ``connection``; HandoverError if it fails."""
    session = JupyterSession(
        key=str(connection["key"]).encode(),
        signature_scheme=str(connection.get("signature_scheme", "hmac-sha256")),
        username="bai-jupyter",
    )
    request = session.msg(
        "execute_request",
        {
            "code": claim_code(relative),
            "silent": True,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
        },
    )
    context = zmq.asyncio.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)

    async def answer() -> dict[str, Any]:
        while True:
            _, frames = session.feed_identities(await sock.recv_multipart())
            reply: dict[str, Any] = session.deserialize(frames)
            if reply["parent_header"].get("msg_id") == request["header"]["msg_id"]:
                return reply

    try:
        sock.connect(f"tcp://{connection['ip']}:{int(connection['shell_port'])}")
        await sock.send_multipart(session.serialize(request))
        reply = await asyncio.wait_for(answer(), timeout)
    except asyncio.TimeoutError as exc:
        raise HandoverError(f"main1's kernel did not answer within {timeout:g} s") from exc
    except (zmq.ZMQError, ValueError, KeyError) as exc:
        raise HandoverError(f"main1's kernel: {exc}") from exc
    finally:
        sock.close(linger=0)
        context.term()
    content = reply["content"]
    if content.get("status") != "ok":
        raise HandoverError(
            f"main1's kernel could not change to {relative}: "
            f"{content.get('ename', '')}: {content.get('evalue', '')}"
        )
