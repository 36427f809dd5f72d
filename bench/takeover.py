"""The takeover time of a manager replica set, beside the restart it replaces.

Run: ``.venv/bin/python bench/takeover.py [--kills N]`` (as root, with Docker, the kernel
image, HAProxy, Debian's PostgreSQL and npm's configurable-http-proxy in .venv/node, as
``./scripts/test`` sets up).

Starts the guide's HA set-up (``tests/harness/haproxy.py``: the sample Hub, two
``bai-jupyter manager`` replicas on one PostgreSQL of its own, HAProxy in front) and prints:

* takeover: ``kill -9`` of the leader → another replica names itself leader in
  ``GET …/scheduler`` (``leader.replica``), N times (the killed replica started again
  between kills); median, min and max;
* baseline, in the same process on the same set: ``kill -9`` of one replica, started
  again at once → its own ``GET …/scheduler`` answers 200 (what a single service's
  restart costs its users, what the second replica saves them); median, min and max.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.error import HTTPError, URLError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness.haproxy import HaHub, Replica, running_ha_hub, wait_serving
from harness.pg import running_postgres

MANAGER = """
c.BaiSessionManager.agents = [
    {"id": "ha", "backend": "docker", "slots": {"cpu": "1", "mem": "1g"}}
]
"""


def _takeover(ha: HaHub) -> float:
    """One kill of the leader: seconds until another replica leads."""
    leader = ha.wait_leader()
    leader.kill()
    killed = time.monotonic()
    while True:
        found = ha.leader()
        if found is not None and found is not leader:
            took = time.monotonic() - killed
            break
        assert time.monotonic() - killed < 60, f"no takeover:\n{ha.tail()}"
        time.sleep(0.02)
    leader.start()
    wait_serving(leader)
    return took


def _answers(replica: Replica, token: str) -> bool:
    with contextlib.suppress(OSError, HTTPError, URLError, ValueError):
        replica.get("scheduler", token, timeout=2)
        return True
    return False


def _restart(ha: HaHub) -> float:
    """One kill of a single replica, started again at once: seconds until it answers."""
    replica = ha.replicas[-1]
    token = ha.hub.tokens["carol"]
    replica.kill()
    killed = time.monotonic()
    replica.start()
    while not _answers(replica, token):
        assert replica.alive, replica.tail()
        time.sleep(0.02)
    return time.monotonic() - killed


def _line(name: str, values: list[float]) -> str:
    return (
        f"{name:<44} median {statistics.median(values):6.2f} s   "
        f"min {min(values):6.2f} s   max {max(values):6.2f} s   (n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="kills of each kind (10)")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="bai-takeover-") as state,
        running_postgres() as pg,
        running_ha_hub(Path(state), pg.database("bai_takeover"), MANAGER) as ha,
    ):
        ha.hub.add_user("carol", admin=True)
        takeovers, restarts = [], []
        for _ in range(args.kills):  # interleaved: both see the same machine
            takeovers.append(_takeover(ha))
            restarts.append(_restart(ha))
        print(_line("takeover: kill -9 of the leader → new leader", takeovers))
        print(_line("baseline: kill -9 + restart → answers again", restarts))
        ratio = statistics.median(takeovers) / statistics.median(restarts)
        print(f"takeover ÷ restart (medians): {ratio:.2f}×")


if __name__ == "__main__":
    main()
