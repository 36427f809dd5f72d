"""A JupyterHub deployment's figures: start-up, a kernel through the shared service, the store.

Run: ``.venv/bin/python bench/hub.py [--runs N]`` (needs Docker, the kernel image,
npm's configurable-http-proxy in .venv/node and ``BAI_TEST_POSTGRES_URL``, as
``./scripts/test`` sets up).

Prints, in one run:

* the sample Hub and its manager service, started until both answer (s);
* a user's cluster kernel (``POST /api/kernels``, main1 + sub1, until Jupyter has the
  kernel) started through the shared manager service from a Hub user's server,
  against the same kernelspec in a plain ``jupyter server`` whose extension embeds
  the manager (medians, interleaved; ratio shared ÷ embedded);
* one scheduling pass over 1k pending sessions × 100 agents in a store (load the
  snapshot, decide, write the placements, in one transaction), on PostgreSQL and on
  SQLite (medians over fresh stores; ratio PostgreSQL ÷ SQLite);
* ``--streams N`` (500): N Hub users' event streams held open at once through the
  service, each user making a change (a create, then a delete after ``--hold`` s):
  streams opened, events arrived on every stream, request → event times;
* ``--creates S`` (5): session creates pushed for S seconds by ``--concurrency``
  clients as those users in turn: accepted to PENDING per second, errors, then every
  one deleted (``bench/hub_load.py``; the sessions never start).

``--service-url URL`` sends the streams and creates there instead of the Hub's
``/services/bai-jupyter/`` (a load balancer in front of the service's replicas, which
must authenticate against this Hub); ``--load-only`` runs only those two sections.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import hub_load
from conftest import postgres_database
from harness.haproxy import PREFIX, running_ha_hub
from harness.hub import SERVICE, Hub, start_hub
from harness.server import Server, start_server
from scheduler import make_snapshot

from bai_jupyter import kernelspecs
from bai_jupyter.scheduler import SchedulerConfig, load_plugins
from bai_jupyter.scheduler.queue import run_pass
from bai_jupyter.store import Store

CLUSTER = {"resources": {"cpu": "0.25", "mem": "256m"}, "cluster_size": 2}


def median_ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:8.0f} ms"


async def _kernel_start(
    post: Callable[[], Awaitable[tuple[int, bytes]]],
    delete: Callable[[str], Awaitable[object]],
) -> float:
    t0 = time.perf_counter()
    code, body = await post()
    took = time.perf_counter() - t0
    assert code == 201, body
    await delete(json.loads(body)["id"])
    return took


async def kernel_arms(hub: Hub, server: Server, runs: int) -> tuple[list[float], list[float]]:
    shared: list[float] = []
    embedded: list[float] = []

    async def hub_post() -> tuple[int, bytes]:
        r = await hub.fetch("POST", "user/alice/api/kernels", "alice", {"name": "bai-cluster"})
        return r.code, r.body

    async def hub_delete(kernel_id: str) -> object:
        return await hub.fetch("DELETE", f"user/alice/api/kernels/{kernel_id}", "alice")

    async def srv_post() -> tuple[int, bytes]:
        r = await server.fetch("POST", "api/kernels", {"name": "bai-cluster"})
        return r.code, r.body

    async def srv_delete(kernel_id: str) -> object:
        return await server.fetch("DELETE", f"api/kernels/{kernel_id}")

    for i in range(runs + 1):  # the first of each is a warm-up, not counted
        a = await _kernel_start(hub_post, hub_delete)
        b = await _kernel_start(srv_post, srv_delete)
        if i:
            shared.append(a)
            embedded.append(b)
    return shared, embedded


def pass_time(url: str, seed: int) -> float:
    """One pass over 1k pending × 100 agents stored at ``url`` (a fresh store)."""
    snapshot = make_snapshot(1_000, 100, seed=seed)
    store = Store(url)
    try:
        with store.write() as tx:
            for agent in snapshot.agents:
                tx.put_agent(agent)
            for session in snapshot.pending:
                tx.add_session(session)
        config = SchedulerConfig.from_options("drf", "concentrated")
        sequencer, selector = load_plugins(config)
        t0 = time.perf_counter()
        result = run_pass(store, "default", config, sequencer, selector, time.time())
        took = time.perf_counter() - t0
        assert result.placements, "the pass placed nothing"
        return took
    finally:
        store.close()


def _kernelspec(root: Path) -> None:
    folder = root / "data" / "kernels" / "bai-cluster"
    folder.mkdir(parents=True)
    spec = kernelspecs.kernelspec_json("bai-cluster", CLUSTER)
    (folder / "kernel.json").write_text(json.dumps(spec))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="samples per arm (default 5)")
    parser.add_argument("--streams", type=int, default=500, help="event streams held (0: skip)")
    parser.add_argument("--hold", type=float, default=10.0, help="seconds the streams are held")
    parser.add_argument("--creates", type=float, default=5.0, help="seconds of creates (0: skip)")
    parser.add_argument("--concurrency", type=int, default=64, help="clients pushing creates")
    parser.add_argument("--service-url", help="where streams and creates go (a load balancer)")
    parser.add_argument("--load-only", action="store_true", help="only streams and creates")
    parser.add_argument(
        "--replicas",
        type=int,
        default=0,
        help="streams and creates through HAProxy in front of this many manager replicas "
        "(the guide's HA set-up, as the HA tests start it; 0: the one service the Hub starts)",
    )
    args = parser.parse_args()
    pg = os.environ.get("BAI_TEST_POSTGRES_URL")
    if not pg:
        raise SystemExit("BAI_TEST_POSTGRES_URL is not set (./scripts/test sets up PostgreSQL)")
    work = Path(tempfile.mkdtemp(prefix="bai-bench-hub-"))
    if not args.load_only:
        passes(args.runs, work, pg)
    if args.replicas:
        with (
            postgres_database(pg) as store_url,
            running_ha_hub(work / "ha", store_url, count=args.replicas) as ha,
        ):
            args.service_url = args.service_url or ha.haproxy.url + PREFIX
            print(f"{args.replicas} manager replicas behind HAProxy, one PostgreSQL store")
            load(ha.hub, args)
        return
    with postgres_database(pg) as store_url:
        t0 = time.perf_counter()
        hub = start_hub(work / "hub", store_url)
        up = time.perf_counter() - t0
        try:
            if not args.load_only:
                kernels(hub, work, args.runs, up)
            if args.streams or args.creates:
                load(hub, args)
        finally:
            hub.stop()


def passes(runs: int, work: Path, pg: str) -> None:
    print("scheduling pass, 1k pending × 100 agents, drf/concentrated, in a store:")
    sqlite, postgres = [], []
    for i in range(runs):
        sqlite.append(pass_time(f"sqlite:///{work}/pass-{i}.sqlite", seed=i))
        with postgres_database(pg) as url:
            postgres.append(pass_time(url, seed=i))
    print(f"  SQLite     {median_ms(sqlite)}")
    print(
        f"  PostgreSQL {median_ms(postgres)}   ÷ SQLite "
        f"{statistics.median(postgres) / statistics.median(sqlite):.2f}×"
    )


def kernels(hub: Hub, work: Path, runs: int, up: float) -> None:
    t0 = time.perf_counter()
    hub.add_user("alice")
    user_up = time.perf_counter() - t0
    print(f"Hub + manager service up: {up:.1f} s; a user's server: {user_up:.1f} s")
    server = start_server(work / "server")
    _kernelspec(work / "server")
    try:
        shared, embedded = asyncio.run(kernel_arms(hub, server, runs))
    finally:
        server.stop()
    print(f"cluster kernel (main1 + sub1) start, {runs} runs, medians:")
    print(f"  through the shared service (Hub user's server) {median_ms(shared)}")
    print(f"  embedded manager (plain jupyter server)        {median_ms(embedded)}")
    print(f"  shared ÷ embedded: {statistics.median(shared) / statistics.median(embedded):.2f}×")


def load(hub: Hub, args: argparse.Namespace) -> None:
    url = args.service_url or hub.service_url()
    users = max(args.streams, 1)
    t0 = time.perf_counter()
    tokens = hub_load.mint_tokens(hub.api, users, SERVICE)
    print(f"{users} Hub users with a token each: {time.perf_counter() - t0:.1f} s; at {url}")
    if args.streams:
        print(f"{args.streams} event streams held at once:")
        asyncio.run(hub_load.streams(url, tokens[: args.streams], args.hold))
    if args.creates:
        print(f"session creates for {args.creates:g} s:")
        asyncio.run(hub_load.creates(url, tokens, args.creates, args.concurrency))


if __name__ == "__main__":
    main()
