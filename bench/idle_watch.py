"""What the idle watch costs, and SFTP into a system session against ``docker cp``.

Run: ``.venv/bin/python bench/idle_watch.py [--sessions N] [--checks N] [--mib N]``
(needs a Docker engine, the default kernel image and the ``sftp`` client).

* **The idle watch**: N interactive sessions (cpu 0.25, mem 128m) run under all
  three rules (idle_timeout, session_lifetime and utilization, all far away); one
  ``IdleWatch.check()`` is timed ``--checks`` times (the loop itself is stopped
  by a long ``watchdog_interval``): it lists the running sessions, follows each
  kernel's iopub, reads each session's CPU time from the engine (one-shot stats,
  all sessions at once) and rewrites the deadlines that moved. Prints the wall
  time (the engine answers a repeated stats call at its collector's next tick,
  up to 1 s later) and this process's CPU time per check and per session, and
  the share of one core the watch takes at the default 5 s interval.
* **SFTP**: a ``--mib`` MiB file uploaded with ``sftp put`` into a system
  session's data folder, against ``docker cp`` of the same file into the same
  container (the engine's own copy, no encryption), ``--runs`` times each,
  interleaved; prints the medians (MiB/s) and their ratio. sshd encrypts within
  the session's ``cpu`` slot (``--sftp-cpu``, default 1): that bounds SFTP.

Everything it starts is removed on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.model import Status

SMALL = {"cpu": "0.25", "mem": "128m"}
FAR = {
    "idle_timeout": 86400,
    "session_lifetime": 86400,
    "utilization": {"cpu_percent": 1, "window": 86400},
}


def _p90(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.9) - 1)]


async def _watch(mgr: BaiSessionManager, sessions: int, checks: int) -> None:
    made = await asyncio.gather(
        *(mgr.create({"resources": SMALL}, "bench") for _ in range(sessions))
    )
    for session in made:
        await mgr.wait_for(session.id, {Status.RUNNING}, timeout=120)
    await mgr.idle.check()  # untimed: the first look starts the kernel followers
    walls, cpus = [], []
    for _ in range(checks):
        started, cpu = time.perf_counter(), time.process_time()
        await mgr.idle.check()
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    print(f"idle watch, {sessions} running sessions, {checks} checks:")
    print(f"  wall per check median {wall * 1000:7.1f} ms   p90 {_p90(walls) * 1000:7.1f} ms")
    print(f"  CPU  per check median {cpu * 1000:7.1f} ms   p90 {_p90(cpus) * 1000:7.1f} ms")
    print(f"  CPU  per session      {cpu / sessions * 1000:7.1f} ms")
    print(f"  at watchdog_interval 5 s: {cpu / 5 * 100:.2f} % of one core (this process)")
    await asyncio.gather(*(mgr.destroy(s.id) for s in made))


async def _sftp(mgr: BaiSessionManager, mib: int, runs: int, cpu: str, tmp: Path) -> None:
    resources = {"cpu": cpu, "mem": "256m"}
    made = await mgr.create({"type": "system", "mounts": ["data"], "resources": resources}, "bench")
    session = await mgr.wait_for(made.id, {Status.RUNNING}, timeout=120)
    sftp = session.kernels[0].info["sftp"]
    key, known, payload = tmp / "key", tmp / "known_hosts", tmp / "payload"
    key.write_text(sftp["private_key"])
    key.chmod(0o600)
    known.write_text(sftp["known_hosts"] + "\n")
    payload.write_bytes(bytes(1024 * 1024) * mib)
    options = ["-i", str(key), "-o", f"UserKnownHostsFile={known}", "-o", "BatchMode=yes"]
    where = f"{sftp['user']}@{sftp['host']}"
    container = session.kernels[0].container_id
    arms: dict[str, list[float]] = {"sftp put": [], "docker cp": []}
    for _ in range(runs):
        started = time.perf_counter()
        await asyncio.to_thread(
            subprocess.run,
            ["sftp", "-b", "-", "-P", str(sftp["port"]), *options, where],
            input=f"put {payload} data/payload\n",
            text=True,
            check=True,
            capture_output=True,
        )
        arms["sftp put"].append(time.perf_counter() - started)
        started = time.perf_counter()
        await asyncio.to_thread(
            subprocess.run,
            ["docker", "cp", str(payload), f"{container}:/home/work/data/payload-cp"],
            check=True,
            capture_output=True,
        )
        arms["docker cp"].append(time.perf_counter() - started)
    print(f"{mib} MiB into a system session's data folder (cpu {cpu}), {runs} runs each:")
    medians = {arm: statistics.median(times) for arm, times in arms.items()}
    for arm, median in medians.items():
        print(f"  {arm:10} median {median:6.2f} s   {mib / median:7.1f} MiB/s")
    print(f"  sftp / docker cp: {medians['sftp put'] / medians['docker cp']:.2f}× the time")
    await mgr.destroy(made.id)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--checks", type=int, default=30)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sftp-cpu", default="1", help="the system session's cpu slot")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mgr = BaiSessionManager(
            store_url=f"sqlite:///{tmp}/store.sqlite",
            backend="docker",
            data_folders_root=f"{tmp}/folders",
            watchdog_interval=3600,  # the bench runs the checks itself
            resource_groups={"default": {"idle": FAR}},
        )
        await mgr.start()
        try:
            await _watch(mgr, args.sessions, args.checks)
            await _sftp(mgr, args.mib, args.runs, args.sftp_cpu, Path(tmp))
        finally:
            live = [s for s in await mgr.list_sessions() if not s.status.is_terminal]
            await asyncio.gather(*(mgr.destroy(s.id) for s in live))
            await mgr.stop()


if __name__ == "__main__":
    asyncio.run(main())
