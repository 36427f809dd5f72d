"""An endpoint's health check: ``GET <health_path>`` on a replica's service answers 2xx/3xx."""

from __future__ import annotations

import asyncio

__all__ = ["check_health"]

#: Seconds a health check may take (connect and the status line).
HEALTH_TIMEOUT = 2.0


async def _status_line(host: str, port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "User-Agent: bai-jupyter-health\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        return await reader.readline()
    finally:
        writer.close()


async def check_health(host: str, port: int, path: str, timeout: float = HEALTH_TIMEOUT) -> str:
    """``""`` when healthy, else what went wrong (for the endpoint's view and the log)."""
    try:
        line = await asyncio.wait_for(_status_line(host, port, path), timeout)
    except asyncio.TimeoutError:
        return f"no answer in {timeout:g} s"
    except OSError as exc:
        return f"cannot connect: {exc.strerror or exc}"
    parts = line.decode("latin-1").split()
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        return f"not an HTTP answer: {line[:60]!r}"
    status = int(parts[1])
    return "" if 200 <= status < 400 else f"{path} answered {status}"
