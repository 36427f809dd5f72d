"""Inference endpoints: routing overhead, replica start under load, requests kept through
scaling, a rolling update and a killed replica.

Run: ``.venv/bin/python bench/endpoints.py [--rounds R] [--requests N] [--workers W]``
(needs a Docker engine and the default kernel image: ``bai-jupyter image build``).

One ``jupyter server`` (Docker agent, token auth) and endpoints of the stdlib model
server in ``examples/inference/model_server.py``. Arms, in one run:

* ``routing``: sequential GETs through ``/bai/endpoints/<name>/predict``, through the
  session proxy to the same replica, and straight to the replica's service (its
  bridge address), interleaved round by round; median and p90 latency, and the
  ratios (goal: the endpoint costs what the session proxy costs);
* ``replica start``: under load (``--workers`` clients, in-flight target 1, up to 3
  replicas), the time from each scale-up decision to the replica being ready,
  against ``docker run`` of the same image and command until its health answers;
* ``scale up / down``: the share of requests answered 200 while replicas are added,
  then while they drain back to one (one client keeps asking);
* ``rolling update``: the share answered 200 while a new replica request replaces
  both replicas one by one;
* ``killed replica``: ``docker kill`` of one of two replicas under load: failed
  requests against requests in flight at the kill.

The clients retry nothing. Everything is removed on exit, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness.server import TOKEN, start_server

from bai_jupyter.model import Status
from bai_jupyter.runtime.protocol import DEFAULT_IMAGE, ServicePort

MODEL = Path(__file__).resolve().parent.parent / "examples" / "inference" / "model_server.py"
SERVICE = "model:http:8000"
CONFIG = """
c.ServerApp.jpserver_extensions = {"bai_jupyter": True, "jupyterlab": False,
    "jupyter_lsp": False, "jupyter_server_terminals": False, "notebook_shim": False}
c.ServerApp.log_level = "WARN"
c.BaiSessionManager.backend = "docker"
c.ReplicaKeeper.interval = 0.5
"""
HEADERS = {"Authorization": f"token {TOKEN}"}


def model_command() -> str:
    code = base64.b64encode(MODEL.read_bytes()).decode()
    return f"exec python3 -c \"import base64; exec(base64.b64decode('{code}'))\""


class Bench:
    def __init__(self, url: str) -> None:
        self.url = url
        self.client = AsyncHTTPClient()

    async def api(self, method: str, path: str, body: Any = None) -> Any:
        request = HTTPRequest(
            f"{self.url}bai/api/v1/{path}",
            method=method,
            headers=HEADERS,
            body=None if body is None and method in ("GET", "DELETE") else json.dumps(body or {}),
            request_timeout=60,
        )
        reply = await self.client.fetch(request)
        return json.loads(reply.body)

    async def endpoint(self, name: str, delay: float, scaling: dict[str, Any]) -> None:
        replica = {
            "image": DEFAULT_IMAGE,
            "resources": {"cpu": "0.25", "mem": "256m"},
            "startup_command": model_command(),
            "service_ports": [SERVICE],
            "env": {"DELAY": str(delay), "MODEL_VERSION": "1"},
        }
        body = {"name": name, "replica": replica, "health_path": "/health",
                "health_interval": 1, "scaling": scaling}  # fmt: skip
        await self.api("POST", "endpoints", body)

    async def until(self, name: str, test: Any, timeout: float = 180) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            view: dict[str, Any] = await self.api("GET", f"endpoints/{name}")
            if test(view):
                return view
            if time.monotonic() > deadline:
                raise SystemExit(f"endpoint {name} did not get there: {json.dumps(view)[-2000:]}")
            await asyncio.sleep(0.1)

    async def get(self, url: str, headers: dict[str, str] | None = None) -> tuple[float, int]:
        started = time.perf_counter()
        request = HTTPRequest(url, headers=headers or {}, request_timeout=30)
        reply = await self.client.fetch(request, raise_error=False)
        return time.perf_counter() - started, reply.code


def ready(count: int, generation: int | None = None) -> Any:
    def test(view: dict[str, Any]) -> bool:
        good = [r for r in view["replicas"] if r["healthy"] and not r["draining"]
                and (generation is None or r["generation"] == generation)]  # fmt: skip
        return len(good) == count == len(view["replicas"])

    return test


@contextlib.asynccontextmanager
async def load(bench: Bench, name: str, workers: int) -> AsyncIterator[list[tuple[float, int]]]:
    """``workers`` clients asking one after the other; (time, status) of each answer."""
    answers: list[tuple[float, int]] = []
    stop = asyncio.Event()
    url = f"{bench.url}bai/endpoints/{name}/predict"

    async def worker() -> None:
        while not stop.is_set():
            _, code = await bench.get(url, HEADERS)
            answers.append((time.monotonic(), code))

    tasks = [asyncio.ensure_future(worker()) for _ in range(workers)]
    try:
        yield answers
    finally:
        stop.set()
        await asyncio.gather(*tasks)


def rate(answers: list[tuple[float, int]], since: float = 0.0) -> str:
    seen = [code for at, code in answers if at >= since]
    good = sum(code == 200 for code in seen)
    return f"{good}/{len(seen)} = {100 * good / max(len(seen), 1):.2f} %"


def p90(values: list[float]) -> float:
    return sorted(values)[int(0.9 * (len(values) - 1))]


async def routing(bench: Bench, rounds: int, requests: int) -> None:
    await bench.endpoint("route", 0.0, {"min_replicas": 1, "max_replicas": 1})
    view = await bench.until("route", ready(1))
    session = await bench.api("GET", f"sessions/{view['replicas'][0]['session_id']}")
    info = session["kernels"][0]["info"]
    port = info["ports"][ServicePort.parse(SERVICE).port_key]
    direct_url = f"http://{info['host']}:{port}/predict"
    arms = {
        "direct": (direct_url, {}),
        "session proxy": (f"{bench.url}bai/sessions/{session['id']}/proxy/model/predict", HEADERS),
        "endpoint": (f"{bench.url}bai/endpoints/route/predict", HEADERS),
    }
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    for _ in range(rounds):
        for arm, (url, headers) in arms.items():
            for _ in range(requests):
                took, code = await bench.get(url, headers)
                assert code == 200, (arm, code)
                times[arm].append(took)
    median = {arm: statistics.median(times[arm]) * 1000 for arm in arms}
    print(f"routing ({rounds} × {requests} GETs per arm, interleaved)")
    for arm in arms:
        ms = [t * 1000 for t in times[arm]]
        print(f"  {arm:<14} median {median[arm]:6.2f} ms   p90 {p90(ms):6.2f} ms")
    d, e, s = median["direct"], median["endpoint"], median["session proxy"]
    print(f"  endpoint ÷ direct (median): {e / d:.2f}× (+{e - d:.2f} ms per request)")
    print(f"  endpoint ÷ session proxy (median): {e / s:.2f}×")
    await bench.api("DELETE", "endpoints/route")


async def sh(*argv: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv[:3])} …: {err.decode()[-500:]}")
    return out.decode().strip()


async def raw_start(bench: Bench, samples: int) -> list[float]:
    """``docker run`` of the same image and model server until its health answers."""
    took = []
    for _ in range(samples):
        name = f"bai-bench-raw-{os.getpid()}"
        started = time.monotonic()
        await sh("docker", "run", "-d", "--rm", "--name", name, "--cpus", "0.25", "-m", "256m",
                 DEFAULT_IMAGE, "sh", "-c", model_command())  # fmt: skip
        try:
            address = await sh("docker", "inspect", "-f", "{{.NetworkSettings.IPAddress}}", name)
            for _ in range(3000):  # a minute
                with contextlib.suppress(OSError):  # nothing listens yet
                    if (await bench.get(f"http://{address}:8000/health"))[1] == 200:
                        break
                await asyncio.sleep(0.02)
            took.append(time.monotonic() - started)
        finally:
            await sh("docker", "rm", "-f", name)
    return took


async def scaling(bench: Bench, workers: int) -> None:
    rule = {"min_replicas": 1, "max_replicas": 3, "metric": "inflight", "target": 1, "window": 5}
    await bench.endpoint("scale", 0.05, rule)
    await bench.until("scale", ready(1))
    adds: list[float] = []
    async with load(bench, "scale", workers) as answers:
        started = time.monotonic()
        seen_ready, last = 1, time.time()
        while seen_ready < 3:
            view = await bench.api("GET", "endpoints/scale")
            ups = [d["at"] for d in view["decisions"] if "more replicas" in d["reason"]]
            if ups:
                last = ups[-1]
            if view["ready_replicas"] > seen_ready:
                adds += [time.time() - last] * (view["ready_replicas"] - seen_ready)
                seen_ready = view["ready_replicas"]
            if time.monotonic() - started > 180:
                raise SystemExit("the endpoint did not scale to 3 replicas")
            await asyncio.sleep(0.05)
        up_rate = rate(answers)
    async with load(bench, "scale", 1) as answers:
        await bench.until("scale", lambda v: v["desired"] == 1 and ready(1)(v))
        down_rate = rate(answers)
    baseline = await raw_start(bench, 3)
    add, raw = statistics.median(adds), statistics.median(baseline)
    print(f"replica start under load ({workers} clients; {len(adds)} added)")
    print(f"  decision → ready, median {add:.2f} s; docker run → healthy {raw:.2f} s; "
          f"{add / raw:.2f}×")  # fmt: skip
    print(f"  answered during scale-up:   {up_rate}")
    print(f"  answered during scale-down: {down_rate}")


async def rolling(bench: Bench, workers: int) -> None:
    await bench.api("PATCH", "endpoints/scale", {"scaling": {"min_replicas": 2, "max_replicas": 2}})
    await bench.until("scale", ready(2))
    view = await bench.api("GET", "endpoints/scale")
    replica = {**view["spec"]["replica"], "env": {"DELAY": "0.05", "MODEL_VERSION": "2"}}
    async with load(bench, "scale", workers) as answers:
        started = time.monotonic()
        await bench.api("PATCH", "endpoints/scale", {"replica": replica})
        await bench.until("scale", ready(2, generation=2))
        took = time.monotonic() - started
        await asyncio.sleep(1)
    print(f"rolling update of 2 replicas ({workers} clients): {took:.1f} s")
    print(f"  answered: {rate(answers)}")


async def kill(bench: Bench, workers: int) -> None:
    view = await bench.api("GET", "endpoints/scale")
    victim = view["replicas"][0]["session_id"]
    async with load(bench, "scale", workers) as answers:
        await asyncio.sleep(2)
        killed_at = time.monotonic()
        await sh("docker", "kill", f"bai-{victim[:12]}-main1")
        await bench.until(
            "scale",
            lambda v: ready(2)(v) and victim not in {r["session_id"] for r in v["replicas"]},
        )
        replaced = time.monotonic() - killed_at
        await asyncio.sleep(1)
    failed = sum(code != 200 for at, code in answers if at >= killed_at)
    print(f"killed replica ({workers} clients, {workers} requests in flight at most)")
    print(f"  failed after the kill: {failed}; answered {rate(answers, killed_at)}; "
          f"replaced in {replaced:.1f} s")  # fmt: skip
    await bench.api("DELETE", "endpoints/scale")


async def run(args: argparse.Namespace, url: str) -> None:
    AsyncHTTPClient.configure(None, max_clients=args.workers + 8)
    bench = Bench(url)
    print(f"bai-jupyter endpoints bench — {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    await routing(bench, args.rounds, args.requests)
    await scaling(bench, args.workers)
    await rolling(bench, min(args.workers, 4))
    await kill(bench, min(args.workers, 4))


def end_everything(url: str) -> None:
    """Delete the endpoints, then wait for their replicas (sessions outlive the server)."""

    def call(method: str, path: str) -> Any:
        request = urllib.request.Request(f"{url}bai/api/v1/{path}", method=method, headers=HEADERS)
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.load(reply)

    for endpoint in call("GET", "endpoints")["endpoints"]:
        call("DELETE", f"endpoints/{endpoint['name']}")
    deadline = time.monotonic() + 60
    live = ",".join(s.value for s in Status if not s.is_terminal)
    while call("GET", f"sessions?status={live}")["sessions"] and time.monotonic() < deadline:
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--requests", type=int, default=100, help="GETs per arm and round")
    parser.add_argument("--workers", type=int, default=6, help="clients under load (default 6)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bai-bench-endpoints-") as tmp:
        server = start_server(Path(tmp) / "server", CONFIG)
        try:
            asyncio.run(run(args, server.url))
        finally:
            with contextlib.suppress(Exception):
                end_everything(server.url)
            server.stop()


if __name__ == "__main__":
    main()
