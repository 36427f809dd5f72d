"""Load on a Hub's manager service: many users' event streams held at once, a burst of creates.

Used by ``bench/hub.py --streams N --creates SECONDS``. Both talk to one service URL
(``--service-url``; default the Hub's ``/services/bai-jupyter/``): pointing them at a
load balancer in front of the service's replicas is that one argument. Every user is
a real Hub user with a token of their own (scope ``access:services!service=…``), so
each stream and each create is authenticated by the Hub like a browser's.

Sessions made here ask for ``starts_at`` in the year 9999: they are accepted to PENDING
and never start (no container runs), then deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

#: Accepted to PENDING, never started.
LATER = {
    "type": "interactive",
    "resources": {"cpu": "0.25", "mem": "256m"},
    "starts_at": 253402300000,
}
API = "bai/api/v1/"


def mint_tokens(api: Callable[[str, str, Any], Any], users: int, service: str) -> list[str]:
    """``users`` Hub users (made in one call) and a token of each, scoped to the service."""
    names = [f"load{i:04d}" for i in range(users)]
    have = {u["name"] for u in api("GET", "users?limit=10000", None)}
    new = [n for n in names if n not in have]
    if new:
        api("POST", "users", {"usernames": new})
    scopes = [f"access:services!service={service}"]

    def mint(name: str) -> str:
        return str(
            api("POST", f"users/{name}/tokens", {"scopes": scopes, "note": "bench"})["token"]
        )

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(mint, names))


class Stream:
    """One user's ``GET events`` over a raw connection: connected once the 200 is read."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.error: str | None = None
        self.writer: asyncio.StreamWriter | None = None
        #: Set at every event (shared by the streams of one run, so one waiter wakes).
        self.news = asyncio.Event()

    async def open(self) -> None:
        parts = urlsplit(self.url + API + "events")
        reader, self.writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
        self.writer.write(
            f"GET {parts.path} HTTP/1.0\r\nHost: {parts.netloc}\r\n"
            f"Authorization: token {self.token}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        status = head.split(b" ", 2)[1]
        if status != b"200":
            raise ConnectionError(f"events answered {status.decode()}: {head[:200]!r}")
        self.task = asyncio.ensure_future(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        buffer = b""
        try:
            while chunk := await reader.read(65536):
                buffer = (buffer + chunk).replace(b"\r\n", b"\n")
                while b"\n\n" in buffer:
                    frame, buffer = buffer.split(b"\n\n", 1)
                    data = [ln[5:] for ln in frame.split(b"\n") if ln.startswith(b"data:")]
                    if data:
                        self.events.append((time.perf_counter(), json.loads(b"\n".join(data))))
                        self.news.set()
            self.error = "the stream was closed"
        except (OSError, ValueError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def seen(self, session_id: str, status: str) -> float | None:
        return next(
            (
                t
                for t, e in self.events
                if e.get("session_id") == session_id and e.get("status") == status
            ),
            None,
        )

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _call(url: str, token: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    request = HTTPRequest(
        url + API + path,
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        body=None if body is None else json.dumps(body),
        request_timeout=60,
        allow_nonstandard_methods=True,
    )
    try:
        reply = await AsyncHTTPClient().fetch(request)
    except HTTPClientError as exc:
        return exc.code, exc.response.body[:200] if exc.response is not None else str(exc)
    except OSError as exc:
        return 0, str(exc)
    return reply.code, json.loads(reply.body) if reply.body else None


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(len(ordered) * q / 100) - 1)] if ordered else 0.0


async def _wave(
    url: str, live: list[Stream], status: str, ids: dict[int, str] | None
) -> dict[int, str]:
    """Each user makes one change (a create, or a delete of ``ids``); every stream must
    tell its user's change with ``status``. The ids of the sessions changed come back."""
    method = "POST" if ids is None else "DELETE"
    news = live[0].news if live else asyncio.Event()
    sent: dict[int, float] = {}

    async def change(i: int, s: Stream) -> str | None:
        sent[i] = time.perf_counter()
        if ids is None:
            code, body = await _call(url, s.token, "POST", "sessions", LATER)
            return str(body["id"]) if code == 201 else None
        if i not in ids:
            return None
        code, _ = await _call(url, s.token, "DELETE", f"sessions/{ids[i]}")
        return ids[i] if code == 200 else None

    made = await asyncio.gather(*(change(i, s) for i, s in enumerate(live)))
    done = {i: sid for i, sid in enumerate(made) if sid}
    deadline = time.perf_counter() + 60
    while not all(live[i].seen(sid, status) for i, sid in done.items()):
        if (left := deadline - time.perf_counter()) <= 0:
            break
        news.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(news.wait(), left)
    got = {i: t for i, sid in done.items() if (t := live[i].seen(sid, status)) is not None}
    lags = [got[i] - sent[i] for i in got]
    print(
        f"  {method} as each user: {len(done)}/{len(live)} accepted; {status} event on "
        f"{len(got)}/{len(live)} streams; request → event p50 {_pct(lags, 50) * 1e3:.0f} ms, "
        f"p99 {_pct(lags, 99) * 1e3:.0f} ms, max {max(lags, default=0) * 1e3:.0f} ms"
    )
    return done


async def streams(url: str, tokens: list[str], hold: float) -> None:
    """Open one stream per token, hold them, and check each gets its user's two changes."""
    t0 = time.perf_counter()
    opened = [Stream(url, token) for token in tokens]
    news = asyncio.Event()
    for s in opened:
        s.news = news
    results = await asyncio.gather(*(s.open() for s in opened), return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    took = time.perf_counter() - t0
    print(f"  {len(tokens) - len(failed)}/{len(tokens)} streams open in {took:.1f} s")
    for exc in failed[:3]:
        print(f"    failed: {type(exc).__name__}: {exc}")
    live = [s for s, r in zip(opened, results) if not isinstance(r, BaseException)]
    try:
        ids = await _wave(url, live, "PENDING", None)
        await asyncio.sleep(hold)  # held open and quiet before the second change
        await _wave(url, live, "CANCELLED", ids)
        cut = [s.error for s in live if s.error]
        print(f"  streams cut while held: {len(cut)}" + (f" ({cut[0]})" if cut else ""))
    finally:
        for s in opened:
            s.close()


@dataclass
class Burst:
    accepted: list[str] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)


async def creates(url: str, tokens: list[str], seconds: float, concurrency: int) -> None:
    """POST sessions as fast as ``concurrency`` clients can for ``seconds``, users in turn."""
    AsyncHTTPClient.configure(None, max_clients=concurrency)
    burst, turn = Burst(), iter(range(10**9))
    owners: dict[str, str] = {}
    end = time.perf_counter() + seconds

    async def client() -> None:
        while time.perf_counter() < end:
            token = tokens[next(turn) % len(tokens)]
            t = time.perf_counter()
            code, body = await _call(url, token, "POST", "sessions", LATER)
            burst.latencies.append(time.perf_counter() - t)
            if code == 201:
                burst.accepted.append(body["id"])
                owners[body["id"]] = token
            else:
                key = f"{code} {body!r}"[:120]
                burst.errors[key] = burst.errors.get(key, 0) + 1

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    took = time.perf_counter() - t0
    n = len(burst.accepted)
    print(
        f"  {n} creates accepted to PENDING in {took:.1f} s = {n / took:.0f}/s "
        f"({concurrency} clients, {len(tokens)} users); errors: {sum(burst.errors.values())}; "
        f"latency p50 {_pct(burst.latencies, 50) * 1e3:.0f} ms, p99 "
        f"{_pct(burst.latencies, 99) * 1e3:.0f} ms"
    )
    for key, count in list(burst.errors.items())[:3]:
        print(f"    {count}× {key}")
    t0 = time.perf_counter()
    gone = await asyncio.gather(
        *(_call(url, owners[sid], "DELETE", f"sessions/{sid}") for sid in burst.accepted)
    )
    bad = sum(1 for code, _ in gone if code != 200)
    print(f"  deleted {len(gone) - bad}/{len(gone)} in {time.perf_counter() - t0:.1f} s")
