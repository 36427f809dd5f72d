"""The loop that keeps each endpoint's replicas right: routed, healthy, scaled, current.

Every ``interval`` (and at once when one of its replicas changes status), per
endpoint: the route follows the replica sessions (a RUNNING one is routed once
its health check passes); health checks take failing replicas out of rotation
and replace those that stay failing; the autoscaler sets the replica count; and
:func:`~bai_jupyter.endpoints.plan_replicas` says which replicas to start (they
queue like any session) and which to drain (no new requests; ended once idle).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from traitlets import Float
from traitlets.config import LoggingConfigurable

from ...endpoints import Autoscaler, Endpoint, Replica, ReplicaState, Route, Router, plan_replicas
from ...endpoints.health import check_health
from ...errors import BaiError
from ...loops import Backoff, Periodic
from ...model import NOT_ENDED, Session, Status
from ..core import Core
from ..lifecycle.start_stop import Lifecycle
from ..requests.launch import Launcher
from .meta import REPLICA_META, endpoint_of, replica_generation
from .rollout import RolloutWatch

__all__ = ["ReplicaKeeper"]


class ReplicaKeeper(LoggingConfigurable):
    """Routes, health checks, scaling and rolling updates of every endpoint's replicas."""

    interval = Float(
        1.0, config=True, help="Seconds between rounds over the endpoints (load samples, "
        "scaling, health checks of replicas due one)."
    )  # fmt: skip
    drain_timeout = Float(
        30.0,
        config=True,
        help="Seconds a replica being removed (scale-down, rolling update) may finish the "
        "requests it has; then it ends whatever it is doing.",
    )
    startup_timeout = Float(
        600.0,
        config=True,
        help="Seconds a RUNNING replica may take to pass its first health check (a model "
        "loading) before it is ended (endpoint-unhealthy) and replaced.",
    )
    unhealthy_timeout = Float(
        30.0,
        config=True,
        help="Seconds a replica that was healthy may fail its health checks before it is "
        "ended (endpoint-unhealthy) and replaced; it gets no requests meanwhile.",
    )
    rollout_timeout = Float(
        900.0, config=True, help="Seconds a rolling update may go without a new replica "
        "becoming healthy; then the endpoint goes back to the generation it rolled from "
        "(whose replicas kept serving) and its rollout says why."
    )  # fmt: skip
    retry_backoff = Float(
        5.0,
        config=True,
        help="Seconds before the next try after a replica could not start or ended before "
        "it was ever healthy; doubled with each failure in a row, at most 300.",
    )

    def __init__(self, core: Core, launcher: Launcher, lifecycle: Lifecycle, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.core = core
        #: Starts replicas (they queue like any session of the endpoint's owner).
        self.launcher = launcher
        #: Ends them.
        self.lifecycle = lifecycle
        self.router = Router()
        #: Endpoint id → what went wrong last (shown in its view until a replica starts).
        self.errors: dict[str, str] = {}
        self._scalers: dict[str, Autoscaler] = {}
        #: Endpoint id → its replicas' failures in a row, and no new replica before when.
        self._backoff: dict[str, Backoff] = {}
        self._not_before: dict[str, float] = {}
        #: Endpoint id → its replica sessions seen live in the last round.
        self._seen: dict[str, set[str]] = {}
        #: Replicas that were healthy once, and those we are ending.
        self._proven: set[str] = set()
        self._ending: set[str] = set()
        self._checking: set[str] = set()
        #: Whether each endpoint's rolling update is done, or stuck for too long.
        self.rollouts = RolloutWatch(lambda: self.rollout_timeout)
        self._swept = False
        self._wake = asyncio.Event()
        #: Serializes changes of endpoint records (the API's and this loop's).
        self.lock = asyncio.Lock()

    def wake(self) -> None:
        self._wake.set()

    # --- the loops ----------------------------------------------------------------------------

    async def loop(self) -> None:
        """Rounds over the endpoints, until cancelled; a failed round is logged, not fatal."""
        periodic = Periodic(
            self.round,
            lambda: self.interval,
            "a round over the endpoints",
            lambda: self.log,
            event=self._wake,
        )
        await periodic.run()

    async def follow(self) -> None:
        """A replica leaving RUNNING gets no more requests at once; the next round starts now."""
        async for event in self.core.hub.events():
            sid = event["session_id"]
            if not any(sid in seen for seen in self._seen.values()):
                continue
            if event["status"] != Status.RUNNING.value:
                for route in self.router.routes.values():
                    if sid in route.replicas:
                        route.replicas[sid].healthy = False
            self.wake()

    async def round(self) -> None:
        endpoints = await self.core.query(lambda tx: tx.list_endpoints())
        if not endpoints and not self._seen and self._swept:
            self.router.routes.clear()
            return
        self._swept = True  # the first round looks for orphans even without endpoints
        replicas: dict[str, list[Session]] = {}
        live = await self.core.list_sessions(statuses=NOT_ENDED)
        for session in live:
            endpoint_id = endpoint_of(session)
            if endpoint_id is not None:
                replicas.setdefault(endpoint_id, []).append(session)
        known = {e.id for e in endpoints}
        for endpoint_id, orphans in replicas.items():
            if endpoint_id not in known:  # its endpoint was deleted (the API ends them too)
                for session in orphans:
                    self._end_now(session.id, "endpoint-deleted")
        for endpoint_id in set(self._seen) - known:
            del self._seen[endpoint_id]
        names = {e.name: e.id for e in endpoints}
        for name, route in list(self.router.routes.items()):
            if names.get(name) != route.endpoint_id:
                del self.router.routes[name]
        for endpoint in endpoints:
            await self._tend(endpoint, replicas.get(endpoint.id, []))
        ids = {s.id for s in live}
        self._ending &= ids  # those that ended were noted by _note_ended this round
        self._proven &= ids

    # --- one endpoint -------------------------------------------------------------------------

    async def _tend(self, endpoint: Endpoint, sessions: list[Session]) -> None:
        now = time.monotonic()
        route = self.router.routes.get(endpoint.name)
        if route is None:
            route = self.router.routes[endpoint.name] = Route(
                endpoint.id, endpoint.name, endpoint.owner
            )
        await self._note_ended(endpoint, sessions, now)
        self._sync(route, endpoint, sessions)
        self._check(route, endpoint)
        await self._replace_unhealthy(route, endpoint, now)
        endpoint = await self._follow_rollout(route, endpoint, sessions)
        load = route.meter.sample(now, endpoint.spec.scaling.window)
        route.load = load
        scaler = self._scalers.setdefault(endpoint.id, Autoscaler())
        desired, reason = scaler.step(endpoint.spec.scaling, endpoint.desired, load, now)
        if reason:
            endpoint = await self.decide(endpoint.id, desired, reason) or endpoint
        states = [
            ReplicaState(
                s.id,
                replica_generation(s),
                ready=s.id in route.replicas and route.replicas[s.id].ready,
                in_flight=route.replicas[s.id].in_flight if s.id in route.replicas else 0,
            )
            for s in sessions
            if s.id not in self._ending
            and not (s.id in route.replicas and route.replicas[s.id].draining)
        ]
        plan = plan_replicas(states, endpoint.desired, endpoint.generation)
        generations = {s.id: replica_generation(s) for s in sessions}
        for sid in plan.drain:
            old = generations[sid] < endpoint.generation
            if old:
                await self.decide(
                    endpoint.id,
                    endpoint.desired,
                    f"rolling update to generation {endpoint.generation}: "
                    f"replica {sid[:12]} drains",
                )
            self._drain(route, sid, "endpoint-updated" if old else "endpoint-scaled-down")
        not_before = self._not_before.get(endpoint.id, 0.0)
        if plan.create and now >= not_before:
            for _ in range(plan.create):
                if not await self._start_one(endpoint, now):
                    break

    async def _note_ended(self, endpoint: Endpoint, sessions: list[Session], now: float) -> None:
        """Replicas that ended without us: say why, and back off if none ever got healthy."""
        live = {s.id for s in sessions}
        for sid in self._seen.get(endpoint.id, set()) - live:
            if sid in self._ending:
                continue
            try:
                info = (await self.core.get(sid)).status_info or "ended"
            except BaiError:
                info = "gone"
            await self.decide(
                endpoint.id, endpoint.desired, f"replica {sid[:12]} ended ({info}): replaced"
            )
            if sid not in self._proven:
                wait = self._failed(endpoint.id, now)
                self.errors[endpoint.id] = (
                    f"replica {sid[:12]} ended ({info}) before it was ever healthy; "
                    f"next try in {wait:g} s (its logs say why)"
                )
        self._seen[endpoint.id] = live

    def _sync(self, route: Route, endpoint: Endpoint, sessions: list[Session]) -> None:
        """The route's replicas: the RUNNING sessions whose service port is known."""
        running = {s.id: s for s in sessions if s.status is Status.RUNNING}
        for sid in set(route.replicas) - set(running):
            del route.replicas[sid]
        for sid, session in running.items():
            if sid in route.replicas:
                continue
            service = next(
                (p for p in session.spec.services if p.name == endpoint.spec.service), None
            )
            address = session.service_address(service) if service else None
            if address is not None:
                route.replicas[sid] = Replica(sid, replica_generation(session), *address)

    def _check(self, route: Route, endpoint: Endpoint) -> None:
        """Start the health checks that are due (a new replica's: every round until it
        passes); they run in the background, so a hung replica never holds up a round."""
        now = time.monotonic()
        for replica in route.replicas.values():
            if replica.draining or replica.session_id in self._checking:
                continue
            if replica.healthy_at is None or (
                now - replica.checked_at >= endpoint.spec.health_interval
            ):
                self._checking.add(replica.session_id)
                self.core.spawn(self._check_one(replica, endpoint))

    async def _check_one(self, replica: Replica, endpoint: Endpoint) -> None:
        try:
            problem = await check_health(replica.host, replica.port, endpoint.spec.health_path)
        finally:
            self._checking.discard(replica.session_id)
        replica.checked_at = time.monotonic()
        if not problem:
            replica.healthy, replica.failures, replica.problem = True, 0, ""
            replica.healthy_at = replica.checked_at
            if replica.session_id not in self._proven:
                self._proven.add(replica.session_id)
                self._backoff.pop(endpoint.id, None)
                self._not_before.pop(endpoint.id, None)
                self.errors.pop(endpoint.id, None)
                self.wake()  # routed now: a rollout or a scale-down may go on at once
            return
        replica.failures += 1
        replica.problem = problem
        if replica.failures >= 2 or replica.healthy_at is None:
            replica.healthy = False

    async def _replace_unhealthy(self, route: Route, endpoint: Endpoint, now: float) -> None:
        for replica in list(route.replicas.values()):
            if replica.draining or replica.healthy:
                continue
            since = replica.healthy_at if replica.healthy_at is not None else replica.added_at
            limit = (
                self.unhealthy_timeout if replica.healthy_at is not None else self.startup_timeout
            )
            if now - since > limit:
                del route.replicas[replica.session_id]
                self._end_now(replica.session_id, "endpoint-unhealthy")
                await self.decide(
                    endpoint.id,
                    endpoint.desired,
                    f"replica {replica.session_id[:12]} unhealthy for {now - since:.0f} s "
                    f"({replica.problem}): replaced",
                )

    async def _follow_rollout(
        self, route: Route, endpoint: Endpoint, sessions: list[Session]
    ) -> Endpoint:
        """A rolling update done, or given up (:class:`RolloutWatch`); replicas of a
        generation above the endpoint's (a rollout given up) end."""
        live = [s for s in sessions if s.id not in self._ending]
        if verdict := self.rollouts.verdict(endpoint, live, route, self._proven, self.errors):
            done, reason = verdict
            generation, now = endpoint.generation, time.time()
            changed = await self.edit(
                endpoint.id, lambda record: record.end_rollout(generation, done, reason, now)
            )
            endpoint = changed or endpoint
            if not done:  # the new generation's failures say nothing of the one that serves
                self.log.warning("bai-jupyter: endpoint %s: %s", endpoint.name, reason)
                for kept in (self.errors, self._backoff, self._not_before):
                    kept.pop(endpoint.id, None)
        for session in live:
            if replica_generation(session) > endpoint.generation:
                route.replicas.pop(session.id, None)
                self._end_now(session.id, "endpoint-rollout-failed")
        return endpoint

    # --- starting and ending replicas ---------------------------------------------------------

    def _failed(self, endpoint_id: str, now: float) -> float:
        """Count a replica of the endpoint that failed; the seconds before the next try."""
        backoff = self._backoff.setdefault(endpoint_id, Backoff(self.retry_backoff, 300.0))
        backoff.first = self.retry_backoff  # the setting as it is now
        wait = backoff.failed()
        self._not_before[endpoint_id] = now + wait
        return wait

    async def _start_one(self, endpoint: Endpoint, now: float) -> bool:
        meta = {
            REPLICA_META: {
                "id": endpoint.id,
                "name": endpoint.name,
                "generation": endpoint.generation,
            }
        }
        try:
            session = await self.launcher.create(endpoint.spec.replica, endpoint.owner, meta=meta)
        except BaiError as exc:
            wait = self._failed(endpoint.id, now)
            self.errors[endpoint.id] = f"a replica could not start: {exc}; next try in {wait:g} s"
            self.log.warning(
                "bai-jupyter: endpoint %s: %s", endpoint.name, self.errors[endpoint.id]
            )
            return False
        self._seen.setdefault(endpoint.id, set()).add(session.id)
        return True

    def _drain(self, route: Route, session_id: str, reason: str) -> None:
        """No new requests to it; end it once its requests are answered (or drain_timeout)."""
        replica = route.replicas.get(session_id)
        if replica is None:  # not routed yet: nothing to finish
            self._end_now(session_id, reason)
            return
        replica.draining = True
        replica.draining_at = time.monotonic()
        replica.drained = asyncio.Event()
        if replica.in_flight == 0:
            replica.drained.set()
        drained = replica.drained

        async def drain() -> None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(drained.wait(), self.drain_timeout)
            await self._end_quietly(session_id, reason)

        self._ending.add(session_id)
        self.core.spawn(drain())

    def _end_now(self, session_id: str, reason: str) -> None:
        if session_id not in self._ending:
            self._ending.add(session_id)
            self.core.spawn(self._end_quietly(session_id, reason))

    async def _end_quietly(self, session_id: str, reason: str) -> None:
        try:
            await self.lifecycle.destroy(session_id, None, reason)
        except BaiError as exc:  # it ended meanwhile
            self.log.debug("bai-jupyter: ending replica %s: %s", session_id, exc)

    # --- the record ---------------------------------------------------------------------------

    async def decide(self, endpoint_id: str, desired: int, reason: str) -> Endpoint | None:
        """Record a decision in the endpoint's record (None: the endpoint is gone)."""

        def change(endpoint: Endpoint) -> None:
            endpoint.decide(time.time(), desired, reason)

        return await self.edit(endpoint_id, change)

    async def edit(self, endpoint_id: str, change: Callable[[Endpoint], None]) -> Endpoint | None:
        """Change an endpoint's record in one transaction, one change at a time."""

        def run(tx: Any) -> Endpoint | None:
            found: Endpoint | None = tx.get_endpoint(endpoint_id=endpoint_id)
            if found is not None:
                change(found)
                tx.save_endpoint(found)
            return found

        async with self.lock:
            return await self.core.db(run)
