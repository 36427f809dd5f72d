"""Service-port proxy: direct vs our proxy vs jupyter-server-proxy's ``/proxy/{host}:{port}``.

Run: ``.venv/bin/python bench/proxy.py [--rounds R] [--small N] [--large N] [--echoes N]``
(needs a Docker engine and the default kernel image: ``bai-jupyter image build``).

One ``jupyter server`` (this extension and jupyter-server-proxy, token auth) with
a docker agent that publishes main1's ports on 127.0.0.1, one interactive
session whose main1 runs a tornado service (the image's Debian tornado 6.2):
``GET /bytes/N`` and a WebSocket echo. Three arms, each reaching the same service:

* ``direct``: the published port itself (127.0.0.1, through Docker's port proxy
  like the other two arms, so all three pay that hop);
* ``bai``: ``/bai/sessions/{id}/proxy/web/…`` (ours: session lookup, ownership,
  credentials stripped, streamed bodies, kept connections to the service);
* ``jsp``: jupyter-server-proxy's plain ``/proxy/127.0.0.1:{port}/…``.

Interleaved in many short rounds (every arm a few requests per round,
``--rounds`` rounds) so they share the machine's noise. HTTP: sequential GETs
of 1 KiB and 1 MiB with tornado's client (a new connection per request):
requests/s over all rounds, the median/p90 latency, and how much the ratio to
``direct`` varies from round to round (the noise). WebSocket: one connection
per arm and round, ``--echoes`` round trips of 64 bytes: median and p90
round-trip time. Prints each arm's figures, the ratios to ``direct`` and to
``jsp``, and the goals with pass/fail (1 MiB ≥ 0.75× direct,
WebSocket median ≤ 1.0× ``jsp``), a median WebSocket overhead ≤ 1 ms, and HTTP
not slower than ``jsp`` (within 5 %).

The session and the server are removed on exit, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness.server import TOKEN, start_server

from bai_jupyter.client import RemoteManager
from bai_jupyter.model import Status

SIZES = {"1 KiB": 1 << 10, "1 MiB": 1 << 20}
SERVICE = r"""
import asyncio
from tornado import web, websocket

blobs = {}

class Bytes(web.RequestHandler):
    def get(self, n):
        n = int(n)
        if n not in blobs:
            blobs[n] = b"x" * n
        self.write(blobs[n])

class Echo(websocket.WebSocketHandler):
    def on_message(self, message):
        self.write_message(message, binary=isinstance(message, bytes))

async def main():
    web.Application([(r"/bytes/(\d+)", Bytes)]).listen(8080)
    web.Application([(r"/echo", Echo)]).listen(8081)
    await asyncio.Event().wait()

asyncio.run(main())
"""
START = f"""
import subprocess, sys
open("/tmp/bench_service.py", "w").write({SERVICE!r})
subprocess.Popen([sys.executable, "/tmp/bench_service.py"], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""
CONFIG = """
c.ServerApp.jpserver_extensions = {"bai_jupyter": True, "jupyter_server_proxy": True,
    "jupyterlab": False, "jupyter_lsp": False, "jupyter_server_terminals": False,
    "notebook_shim": False}
c.ServerApp.log_level = "WARN"
c.BaiSessionManager.agents = [{"id": "docker", "backend": "docker", "publish_ports": True}]
"""


async def timed_gets(url: str, headers: dict[str, str], count: int) -> list[float]:
    """``count`` sequential GETs; each one's seconds."""
    http = AsyncHTTPClient()
    times = []
    for _ in range(count):
        started = time.perf_counter()
        reply = await http.fetch(HTTPRequest(url, headers=headers, decompress_response=False))
        times.append(time.perf_counter() - started)
        assert reply.code == 200
    return times


async def timed_echoes(url: str, headers: dict[str, str], count: int) -> list[float]:
    """One WebSocket connection, ``count`` round trips of 64 bytes; each one's seconds."""
    conn = await websocket_connect(HTTPRequest(url, headers=headers))
    message = "m" * 64
    times = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            await conn.write_message(message)
            assert await conn.read_message() == message
            times.append(time.perf_counter() - started)
    finally:
        conn.close()
    return times


def p90(values: list[float]) -> float:
    return sorted(values)[int(0.9 * (len(values) - 1))]


async def measure(
    args: argparse.Namespace, url: str, session_id: str, host: str, ports: dict[str, int]
) -> None:
    auth = {"Authorization": f"token {TOKEN}"}
    web, ws = ports["service:web"], ports["service:ws"]
    http_arms: dict[str, tuple[str, dict[str, str]]] = {
        "direct": (f"http://{host}:{web}", {}),
        "bai": (f"{url}bai/sessions/{session_id}/proxy/web", auth),
        "jsp": (f"{url}proxy/{host}:{web}", auth),
    }
    ws_url = url.replace("http", "ws", 1)
    ws_arms: dict[str, tuple[str, dict[str, str]]] = {
        "direct": (f"ws://{host}:{ws}/echo", {}),
        "bai": (f"{ws_url}bai/sessions/{session_id}/proxy/ws/echo", auth),
        "jsp": (f"{ws_url}proxy/{host}:{ws}/echo", auth),
    }
    counts = {"1 KiB": args.small, "1 MiB": args.large}
    results: dict[str, dict[str, list[list[float]]]] = {}
    for label, size in SIZES.items():
        for base, headers in http_arms.values():
            await timed_gets(f"{base}/bytes/{size}", headers, 3)  # warm-up, untimed
        results[label] = {arm: [] for arm in http_arms}
        for _ in range(args.rounds):
            for arm, (base, headers) in http_arms.items():
                results[label][arm].append(
                    await timed_gets(f"{base}/bytes/{size}", headers, counts[label])
                )
    echoes: dict[str, list[float]] = {arm: [] for arm in ws_arms}
    for target, headers in ws_arms.values():
        await timed_echoes(target, headers, 10)  # warm-up, untimed
    for _ in range(args.rounds):
        for arm, (target, headers) in ws_arms.items():
            echoes[arm] += await timed_echoes(target, headers, args.echoes)
    report(results, echoes)


def report(
    results: dict[str, dict[str, list[list[float]]]], echoes: dict[str, list[float]]
) -> None:
    rate: dict[tuple[str, str], float] = {}
    columns = ("req/s", 9), ("median ms", 10), ("p90 ms", 8), ("×direct", 8), ("×jsp", 6)
    print(f"{'HTTP GET':10} {'arm':7} " + " ".join(f"{name:>{width}}" for name, width in columns))
    for label, rounds in results.items():
        arms = {arm: [t for times in per_round for t in times] for arm, per_round in rounds.items()}
        for arm, times in arms.items():
            rate[label, arm] = len(times) / sum(times)
        for arm, times in arms.items():
            per_s, mid = rate[label, arm], statistics.median(times) * 1e3
            print(
                f"{label:10} {arm:7} {per_s:9.1f} {mid:10.2f} {p90(times) * 1e3:8.2f} "
                f"{per_s / rate[label, 'direct']:8.2f} {per_s / rate[label, 'jsp']:6.2f}"
            )
        # Noise: bai ÷ direct in each round on its own (same requests, a few at a time).
        ratios = [sum(d) / sum(b) for d, b in zip(rounds["direct"], rounds["bai"], strict=True)]
        low, mid, high = statistics.quantiles(ratios, n=4)
        print(f"{'':10} bai ×direct per round: median {mid:.2f}, quartiles {low:.2f}–{high:.2f}")
    print(f"\n{'WebSocket':10} {'arm':7} {'median ms':>10} {'p90 ms':>8} {'overhead ms':>12}")
    median = {arm: statistics.median(times) for arm, times in echoes.items()}
    for arm, times in echoes.items():
        overhead = (median[arm] - median["direct"]) * 1e3
        mid = median[arm] * 1e3
        print(f"{'echo 64 B':10} {arm:7} {mid:10.3f} {p90(times) * 1e3:8.3f} {overhead:12.3f}")
    bai_over_direct = rate["1 MiB", "bai"] / rate["1 MiB", "direct"]
    ws_over_jsp = median["bai"] / median["jsp"]
    goals = [
        ("1 MiB req/s bai ≥ 0.75× direct", bai_over_direct, bai_over_direct >= 0.75),
        ("WebSocket median bai ≤ 1.0× jsp", ws_over_jsp, ws_over_jsp <= 1.0),
        (
            "WebSocket median overhead of bai ≤ 1 ms",
            (median["bai"] - median["direct"]) * 1e3,
            median["bai"] - median["direct"] <= 1e-3,
        ),
    ]
    for label in SIZES:
        ratio = rate[label, "bai"] / rate[label, "jsp"]
        goals.append((f"{label} req/s bai ≥ 0.95× jsp (not slower)", ratio, ratio >= 0.95))
    print("\nGoals:")
    for name, value, ok in goals:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}: {value:.3f}")


async def bench(args: argparse.Namespace, url: str) -> None:
    client = RemoteManager(url, TOKEN)
    session = await client.create(
        {"service_ports": ["web:http:8080", "ws:http:8081"], "resources": {"mem": "512m"}}
    )
    try:
        session = await client.wait_for(session.id, {Status.RUNNING}, timeout=120)
        if session.status is not Status.RUNNING:
            raise SystemExit(f"the session did not start: {session.status_data}")
        await client.execute(session.id, START)
        main = session.kernels[0]
        host, ports = main.info["host"], main.info["ports"]
        await wait_listening(
            lambda: timed_gets(f"http://{host}:{ports['service:web']}/bytes/1", {}, 1)
        )
        await measure(args, url, session.id, host, ports)
    finally:
        await client.destroy(session.id)


async def wait_listening(probe: Callable[[], Awaitable[object]]) -> None:
    for _ in range(100):
        try:
            await probe()
            return
        except (OSError, HTTPClientError):  # Docker's port proxy accepts, then hangs up
            await asyncio.sleep(0.1)
    raise SystemExit("the service in main1 did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=25, help="interleaved rounds (default 25)")
    parser.add_argument("--small", type=int, default=12, help="1 KiB GETs per arm and round")
    parser.add_argument("--large", type=int, default=4, help="1 MiB GETs per arm and round")
    parser.add_argument("--echoes", type=int, default=40, help="WebSocket echoes per arm and round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bai-bench-proxy-") as tmp:
        server = start_server(Path(tmp) / "server", CONFIG)
        try:
            asyncio.run(bench(args, server.url))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
