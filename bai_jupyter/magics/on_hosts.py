"""``%%bai exec``: one cell run on several kernels of the session at once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any


def exec_argv(host: str, here: str, python: bool, cwd: str) -> list[str]:
    """The command that runs a cell read from stdin on ``host`` (SSH unless it is this one)."""
    if host == here:
        if python:
            return [sys.executable, "-u", "-"]
        return [shutil.which("bash") or "/bin/sh", "-s"]
    remote = "python3 -u -" if python else "bash -s"
    script = f"cd {shlex.quote(cwd)} 2>/dev/null; exec {remote}"
    return ["ssh", "-T", "-o", "BatchMode=yes", host, script]


async def run_on_hosts(
    hosts: list[str], code: str, here: str, python: bool
) -> AsyncIterator[tuple[str, str, Any]]:
    """``(host, "stdout"|"stderr", line)`` as each host prints, then ``(host, "exit", code)``.

    All hosts run at once; leaving early kills whatever still runs.
    """
    inbox: asyncio.Queue[tuple[str, str, Any]] = asyncio.Queue()
    procs: dict[str, asyncio.subprocess.Process] = {}

    async def pipe(host: str, name: str, stream: asyncio.StreamReader) -> None:
        # Chunks, not readline(): that raises on a line over the reader's 64 KiB limit.
        rest = b""
        while chunk := await stream.read(65536):
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                inbox.put_nowait((host, name, line.decode(errors="replace")))
        if rest:
            inbox.put_nowait((host, name, rest.decode(errors="replace")))

    async def one(host: str) -> None:
        # The exit is queued whatever happens, or the consumer would wait for it forever.
        status = 1
        try:
            status = await run(host)
        except Exception as exc:  # shown as that host's error line
            inbox.put_nowait((host, "stderr", f"{type(exc).__name__}: {exc}"))
        finally:
            inbox.put_nowait((host, "exit", status))

    async def run(host: str) -> int:
        try:
            proc = await asyncio.create_subprocess_exec(
                *exec_argv(host, here, python, str(Path.cwd())),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        except OSError as exc:
            inbox.put_nowait((host, "stderr", str(exc)))
            return 127
        procs[host] = proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(code.encode())
            await proc.stdin.drain()
            proc.stdin.close()
        await asyncio.gather(pipe(host, "stdout", proc.stdout), pipe(host, "stderr", proc.stderr))
        return await proc.wait()

    tasks = [asyncio.ensure_future(one(host)) for host in hosts]
    try:
        left = len(hosts)
        while left:
            item = await inbox.get()
            left -= item[1] == "exit"
            yield item
    finally:
        for task in tasks:
            task.cancel()
        for proc in procs.values():
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        await asyncio.gather(*tasks, return_exceptions=True)
