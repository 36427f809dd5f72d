"""Kernel start-up: start request → first ``execute_result``, bai against its baselines.

Run: ``.venv/bin/python bench/kernel_start.py [--runs N]`` (needs a Docker engine,
the default kernel image, and for the peer arm ``pip install -e '.[bench]'``).

Arms, interleaved run by run so they share the machine's noise, each timed from
the start request until the ``execute_result`` of ``1+1`` arrives (after the
client's readiness check, ``wait_for_ready``, as every Jupyter front end does).
Every container arm runs its kernels with the same limits (``cpu 0.5, mem 512m``
each, ``SLOTS``); the local one has none:

* ``local``: a local ipykernel through jupyter_client's ``AsyncKernelManager``;
* ``docker``: ``docker run`` (the SDK) of the kernel image with those limits,
  running ipykernel on a bind-mounted connection file, reached at its bridge
  address like bai's main1 once its heartbeat port listens (as bai's runtime
  waits for it);
* ``peer``: gateway-provisioners' DockerProvisioner (``jupyter docker-spec``) on
  an image derived from the kernel image with its launcher installed as its docs
  say (``pip install gateway_provisioners`` — here the wheels, downloaded on the
  host, unpacked into the image, since containers reach no registry — then
  ``jupyter image-bootstrap install --languages Python``; plus ``python`` →
  ``python3`` and the bootstrap's executable bit, which its script needs);
* ``bai-1`` / ``bai-3``: ``AsyncKernelManager`` on a kernelspec of the ``bai``
  provisioner, cluster size 1 and 3, with an in-process manager (as the server
  extension registers it) on a fresh store: a cold start;
* ``bai-warm``: the same on a kernelspec that a warm pool of size 1 serves
  (``BaiSessionManager.warm_pools``): the launch claims a warm session; the pool
  refills before the next sample (not timed).

Prints median, min and max per arm, ratios to ``docker`` and to ``local``, and
the goals.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from docker.client import DockerClient
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

from bai_jupyter import kernelspecs
from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.registry import register_manager, unregister_manager
from bai_jupyter.request.kernel_launch import launch_request

sys.path.insert(0, str(Path(__file__).resolve().parent))
from raw_kernels import connection_file, limits, wait_listening  # a module beside this one

IMAGE = "bai-jupyter/python:3.11"
PEER_IMAGE = "bai-jupyter/gp-python:3.11"
#: Goals: arm → largest median ratio to ``docker``; and a warm start beats a local one.
GOALS = {"bai-1": 1.15, "bai-3": 1.3}
#: Every container kernel's limits (the docker arm gets the same).
SLOTS = {"cpu": "0.5", "mem": "512m"}
PEER_DOCKERFILE = f"""FROM {IMAGE}
COPY site/ /usr/local/lib/python3.11/dist-packages/
RUN python3 -c "import sys; from gateway_provisioners.cli.image_bootstrapapp import \\
ImageBootstrapApp as A; sys.argv = ['jupyter-image-bootstrap', 'install', '--languages', \\
'Python']; A.launch_instance()"
RUN ln -s /usr/bin/python3 /usr/local/bin/python && chmod +x /usr/local/bin/bootstrap-kernel.sh
CMD ["/usr/local/bin/bootstrap-kernel.sh"]
"""


async def first_result(client: AsyncKernelClient) -> None:
    """Wait for readiness, run ``1+1`` and return once its execute_result arrives."""
    await client.wait_for_ready(timeout=60)
    msg_id = client.execute("1+1")
    while True:
        msg = await client.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_result":
            return


async def via_kernel_manager(kernel_name: str, specs: KernelSpecManager) -> float:
    started = time.perf_counter()
    km = AsyncKernelManager(kernel_name=kernel_name, kernel_spec_manager=specs)
    await km.start_kernel()
    client = km.client()
    client.start_channels()
    await first_result(client)
    took = time.perf_counter() - started
    client.stop_channels()
    await km.shutdown_kernel(now=True)
    return took


async def via_docker_run(engine: Any, workdir: Path) -> float:
    conn = connection_file()
    folder = Path(tempfile.mkdtemp(dir=workdir))
    (folder / "kernel.json").write_text(json.dumps(conn))
    started = time.perf_counter()
    container = await asyncio.to_thread(
        engine.containers.run,
        IMAGE,
        ["python3", "-m", "ipykernel_launcher", "-f", "/conn/kernel.json"],
        detach=True,
        init=True,
        volumes={str(folder): {"bind": "/conn", "mode": "rw"}},
        labels={"bai-bench": "kernel_start"},
        **limits(SLOTS),
    )
    try:
        info = await asyncio.to_thread(engine.api.inspect_container, container.id)
        ip = info["NetworkSettings"]["IPAddress"]
        deadline = time.monotonic() + 60
        await asyncio.to_thread(wait_listening, ip, int(conn["hb_port"]), deadline)
        client = AsyncKernelClient()
        reach: Any = {**conn, "ip": ip}
        client.load_connection_info(reach)
        client.start_channels()
        await first_result(client)
        took = time.perf_counter() - started
        client.stop_channels()
        return took
    finally:
        await asyncio.to_thread(container.remove, force=True)


async def pool_refilled(manager: BaiSessionManager) -> None:
    """Until the bench's pool has its warm session again (between samples, not timed)."""
    while True:
        (pool,) = await manager.pools_view()
        if pool["warm"] and not pool["starting"]:
            return
        await asyncio.sleep(0.1)


def peer_kernelspec(engine: Any, root: Path) -> str | None:
    """Build the peer's image (once) and install its kernelspec; ``None`` without the package."""
    if importlib.util.find_spec("gateway_provisioners") is None:
        return None
    if not engine.images.list(name=PEER_IMAGE):
        context = root / "peer-image"
        wheels = context / "wheels"
        pins = ["gateway-provisioners==0.5.0", "pycryptodomex", "overrides"]
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels)]
        subprocess.run([*pip, *pins], check=True)
        for wheel in wheels.glob("*.whl"):
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(context / "site")
        (context / "Dockerfile").write_text(PEER_DOCKERFILE)
        engine.images.build(path=str(context), tag=PEER_IMAGE, rm=True)
    installer = Path(sys.executable).parent / "jupyter-docker-spec"
    options = ["--prefix", str(root / "peer"), "--kernel-name", "peer", "--language", "Python"]
    subprocess.run(
        [str(installer), "install", *options, "--image-name", PEER_IMAGE],
        check=True,
        capture_output=True,
    )
    kernels = root / "peer" / "share" / "jupyter" / "kernels"
    spec_file = kernels / "peer" / "kernel.json"
    spec = json.loads(spec_file.read_text())
    spec["argv"][0] = sys.executable  # its launcher runs on this side, with the docker SDK
    spec_file.write_text(json.dumps(spec))
    os.environ["KERNEL_USERNAME"] = "bench"  # the peer refuses to start kernels for root
    return str(kernels)


async def main(runs: int) -> int:
    from_env: Any = DockerClient.from_env  # the SDK is untyped
    engine: Any = from_env()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        specs = KernelSpecManager(kernel_dirs=[str(root / "kernels")])
        configs: dict[str, dict[str, Any]] = {
            "bai-1": {"resources": SLOTS},
            "bai-3": {"resources": SLOTS, "cluster_size": 3},
            # What the pool serves: bai-1's request, told apart from it by one variable.
            "bai-warm": {"resources": SLOTS, "env": {"BENCH_ARM": "warm"}},
        }
        for name, config in configs.items():
            spec = kernelspecs.kernelspec_json(name, config)
            (root / "kernels" / name).mkdir(parents=True)
            (root / "kernels" / name / "kernel.json").write_text(json.dumps(spec))
        pool = {"name": "bench", "size": 1, "request": launch_request(configs["bai-warm"])}
        manager = BaiSessionManager(
            store_url=f"sqlite:///{root}/store.sqlite",
            backend="docker",
            warm_pools=[pool],
            warm_pool_interval=0.2,
        )
        await manager.start()
        register_manager(manager)

        async def warm() -> float:
            await pool_refilled(manager)
            return await via_kernel_manager("bai-warm", specs)

        arms: dict[str, Callable[[], Awaitable[float]]] = {
            "local": lambda: via_kernel_manager("python3", KernelSpecManager()),
            "docker": lambda: via_docker_run(engine, root),
        }
        peer_dir = peer_kernelspec(engine, root)
        if peer_dir is not None:
            peer_specs = KernelSpecManager(kernel_dirs=[peer_dir])
            arms["peer"] = lambda: via_kernel_manager("peer", peer_specs)
        arms["bai-1"] = lambda: via_kernel_manager("bai-1", specs)
        arms["bai-3"] = lambda: via_kernel_manager("bai-3", specs)
        arms["bai-warm"] = warm
        times: dict[str, list[float]] = {arm: [] for arm in arms}
        try:
            for start in arms.values():  # warm-up, untimed
                await start()
            for _ in range(runs):
                for name, start in arms.items():
                    times[name].append(await start())
                    await asyncio.sleep(0.3)
        finally:
            unregister_manager(manager)
            for session in await manager.list_sessions():
                if not session.status.is_terminal:
                    await manager.destroy(session.id)
            await manager.stop()
    medians = {arm: statistics.median(t) for arm, t in times.items()}
    print(f"start → first execute_result, {runs} runs per arm (seconds)")
    print(f"{'arm':9} {'median':>7} {'min':>7} {'max':>7} {'×docker':>8} {'×local':>7}")
    for arm, samples in times.items():
        print(
            f"{arm:9} {medians[arm]:7.3f} {min(samples):7.3f} {max(samples):7.3f} "
            f"{medians[arm] / medians['docker']:8.2f} {medians[arm] / medians['local']:7.2f}"
        )
    failed = 0
    for arm, goal in GOALS.items():
        ratio = medians[arm] / medians["docker"]
        ok = ratio <= goal
        failed += not ok
        print(f"goal {arm} ≤ {goal}× docker: {ratio:.2f}× {'PASS' if ok else 'FAIL'}")
    ratio = medians["bai-warm"] / medians["local"]
    failed += ratio >= 1
    print(f"goal bai-warm < 1.0× local: {ratio:.2f}× {'PASS' if ratio < 1 else 'FAIL'}")
    if "peer" in medians:
        ok = medians["bai-1"] < medians["peer"]
        failed += not ok
        ratio = medians["bai-1"] / medians["peer"]
        print(f"goal bai-1 faster than the peer: {ratio:.2f}× {'PASS' if ok else 'FAIL'}")
    else:
        print("goal bai-1 faster than the peer: not measured (pip install -e '.[bench]')")
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per arm (default 5)")
    sys.exit(asyncio.run(main(parser.parse_args().runs)))
