"""The mount policy: host paths only from the operator's allow-list, never the host's own.

Unit tests of :class:`MountPolicy`, then the manager against the real Docker engine:
refused at create, re-checked when the session starts, read-only where forced, no host
directory created, and the containers' capabilities and security options.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from traitlets.config import Config

from bai_jupyter.agents.docker import KEPT_CAPABILITIES
from bai_jupyter.errors import InvalidRequest
from bai_jupyter.manager import BaiSessionManager
from bai_jupyter.model import Status
from bai_jupyter.mounts import (
    ALWAYS_FORBIDDEN,
    Mount,
    MountPolicy,
    MountRefused,
    owner_dir,
    parse_mount,
)

pytestmark = pytest.mark.timeout(180)


def _policy(tmp: Path, allowed: list[str], forbidden: list[str] | None = None) -> MountPolicy:
    return MountPolicy.build(allowed, forbidden or [str(tmp / "store")], tmp / "folders")


def _check(policy: MountPolicy, entry: str, owner: str = "alice") -> Mount:
    return policy.check(parse_mount(entry, owner, Path(policy.folders_root)), owner)


# --- the policy, pure -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("/", "contains"),
        ("/var/run", "never mountable"),
        ("/run", "never mountable"),
        ("/var", "contains /var/lib"),
        ("/proc", "never mountable"),
        ("/proc/1/root", "never mountable|cannot be resolved"),
        ("/sys/fs", "never mountable"),
        ("/dev", "never mountable"),
        ("/run/docker.sock", "never mountable"),
        ("/var/run/docker.sock", "never mountable"),
    ],
)
def test_host_internals_never_mountable_even_when_allowed(
    tmp_path: Path, entry: str, words: str
) -> None:
    policy = _policy(tmp_path, ["/"])  # the widest allow-list there is
    with pytest.raises(MountRefused, match=words):
        _check(policy, entry)


def test_server_paths_and_their_ancestors_refused(tmp_path: Path) -> None:
    store = tmp_path / "srv" / "store"
    store.mkdir(parents=True)
    policy = _policy(tmp_path, [str(tmp_path)], [str(store)])
    for path in (store, store / "x", tmp_path / "srv", tmp_path):
        with pytest.raises(MountRefused):
            _check(policy, str(path))
    (tmp_path / "other").mkdir()
    assert _check(policy, f"{tmp_path}/other").source == str(tmp_path / "other")


def test_symlinks_and_dotdot_are_resolved_first(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "to-proc").symlink_to("/proc")
    (allowed / "to-root").symlink_to("/")
    policy = _policy(tmp_path, [str(allowed)])
    with pytest.raises(MountRefused, match=r"resolves to /proc.*never mountable"):
        _check(policy, f"{allowed}/to-proc")
    with pytest.raises(MountRefused, match="resolves to /"):
        _check(policy, f"{allowed}/to-root:/mnt")
    with pytest.raises(MountRefused, match="allowed_host_paths"):
        _check(policy, f"{allowed}/../../../etc:/mnt")


def test_only_allowed_prefixes_and_ro_is_forced(tmp_path: Path) -> None:
    (tmp_path / "rw" / "a").mkdir(parents=True)
    (tmp_path / "ro" / "b").mkdir(parents=True)
    (tmp_path / "rwx").mkdir()
    policy = _policy(tmp_path, [f"{tmp_path}/rw", f"{tmp_path}/ro:ro"])
    assert not _check(policy, f"{tmp_path}/rw/a").read_only
    assert _check(policy, f"{tmp_path}/rw/a:ro").read_only
    assert _check(policy, f"{tmp_path}/ro/b:/mnt/b:rw").read_only  # forced
    with pytest.raises(MountRefused, match="allowed_host_paths"):
        _check(policy, f"{tmp_path}/rwx")  # a prefix is a directory, not a string
    with pytest.raises(MountRefused, match=r"allowed_host_paths \(none configured\)"):
        _check(_policy(tmp_path, []), f"{tmp_path}/rw")
    with pytest.raises(ValueError, match="use /prefix"):
        MountPolicy.build(["relative"], [], tmp_path)


def test_data_folders_are_the_owners_own(tmp_path: Path) -> None:
    policy = _policy(tmp_path, ["/"])
    folders = tmp_path / "folders"
    mine = _check(policy, "data")
    assert mine.folder and mine.source == f"{folders}/alice/data"
    # Crafted owner names stay inside the root, each in its own directory.
    for owner in ("..", "a/b", "../bob", ".", ""):
        got = _check(policy, "data", owner)
        assert Path(got.source).parent.parent == folders, (owner, got)
        assert Path(got.source).parent.name not in ("..", ".", "bob", "alice")
    assert owner_dir("a/b") != owner_dir("a_b") and owner_dir("..") != owner_dir(".")
    # Another user's folders, the common root and what holds it: refused as host paths.
    for path in (folders / "bob", folders / "bob" / "data", folders, tmp_path):
        with pytest.raises(MountRefused):
            _check(policy, f"{path}:/mnt/x")
    assert _check(policy, f"{folders}/alice/data:/mnt/x").source == f"{folders}/alice/data"


_SEGMENT = st.lists(st.text(alphabet="abc.-_", min_size=1, max_size=5), max_size=3).map(
    lambda parts: "/".join(p for p in parts if p not in (".", ".."))
)


@settings(max_examples=200, deadline=None)
@given(base=st.sampled_from(ALWAYS_FORBIDDEN), tail=_SEGMENT, up=st.integers(0, 3))
def test_anything_resolving_into_or_above_a_forbidden_path_is_refused(
    base: str, tail: str, up: int
) -> None:
    """Inside a forbidden path (whatever the tail), or any of its ancestors: refused."""
    policy = MountPolicy.build(["/"], [], "/nonexistent-bai-folders")
    inside = f"{base}/{tail}".rstrip("/") or "/"
    parents = Path(os.path.realpath(base)).parents
    ancestor = str(parents[min(up, len(parents)) - 1]) if up else base
    for path in (inside, ancestor):
        with pytest.raises(MountRefused):
            policy.check(Mount(path, "/mnt/x"), "alice")


# --- the manager and the engine ---------------------------------------------------------------


@pytest.fixture
async def mgr(tmp_path: Path, kernel_image: str) -> AsyncIterator[BaiSessionManager]:
    (tmp_path / "allowed" / "rw").mkdir(parents=True)
    (tmp_path / "allowed" / "ro").mkdir(parents=True)
    manager = BaiSessionManager(
        store_url=f"sqlite:///{tmp_path}/store/store.sqlite",
        backend="docker",
        data_folders_root=str(tmp_path / "folders"),
        config=Config({"DockerAgent": {"disk_limit": "1g"}}),
        allowed_host_paths=[str(tmp_path / "allowed" / "rw"), f"{tmp_path}/allowed/ro:ro"],
        pass_interval=0.5,
    )
    (tmp_path / "store").mkdir()
    await manager.start()
    try:
        yield manager
    finally:
        for session in await manager.list_sessions():
            if not session.status.is_terminal:
                await manager.destroy(session.id)
        await manager.stop()


@pytest.mark.docker
async def test_create_refuses_and_creates_nothing(mgr: BaiSessionManager, tmp_path: Path) -> None:
    missing = tmp_path / "allowed" / "rw" / "not-there"
    foreign = tmp_path / "elsewhere" / "new"
    (tmp_path / "allowed" / "rw" / "link").symlink_to(tmp_path / "store")
    refused = {
        "/": "contains",
        "/var/run": "never mountable",
        "/proc:/mnt/p": "never mountable",
        f"{tmp_path}/store:/mnt/s": "never mountable",
        f"{tmp_path}/allowed/rw/link:/mnt/s": "resolves to",
        f"{tmp_path}/folders/bob/data:/mnt/b": "another user's",
        f"{missing}:/mnt/m": "no such host path",
        f"{foreign}:/mnt/f": "allowed_host_paths",
    }
    for entry, words in refused.items():
        with pytest.raises(InvalidRequest, match=words):
            await mgr.create({"mounts": [entry]}, "alice")
    assert not missing.exists() and not foreign.exists() and not foreign.parent.exists()
    assert await mgr.list_sessions() == []


@pytest.mark.docker
async def test_policy_checked_again_at_start(mgr: BaiSessionManager, tmp_path: Path) -> None:
    session = await mgr.create(
        {"mounts": [f"{tmp_path}/allowed/rw:/mnt/rw"], "starts_at": time.time() + 1.5}, "alice"
    )
    mgr.allowed_host_paths = []  # the operator took it back while it waited
    done = await mgr.wait_for(session.id, {Status.CANCELLED, Status.RUNNING}, timeout=60)
    assert done.status is Status.CANCELLED and done.status_info == "failed-to-start"
    assert "allowed_host_paths" in done.status_data["error"]


@pytest.mark.docker
async def test_container_mounts_capabilities_and_privileges(
    mgr: BaiSessionManager, tmp_path: Path, docker_engine: Any
) -> None:
    session = await mgr.create(
        {
            "cluster_size": 2,
            "resources": {"cpu": "0.5", "mem": "256m"},
            "mounts": ["data", f"{tmp_path}/allowed/ro:/mnt/ro", f"{tmp_path}/allowed/rw"],
        },
        "alice",
    )
    running = await mgr.wait_for(session.id, {Status.RUNNING}, timeout=120)
    assert running.status is Status.RUNNING, running.status_data
    assert (tmp_path / "folders" / "alice" / "data").is_dir()  # the owner's folder: made
    for kernel in running.kernels:
        attrs = docker_engine.containers.get(kernel.container_id).attrs
        host = attrs["HostConfig"]
        assert host["CapDrop"] == ["ALL"]
        assert sorted(host["CapAdd"]) == sorted(KEPT_CAPABILITIES)
        assert host["SecurityOpt"] == ["no-new-privileges"]
        assert not host.get("Binds")
        mounts = {m["Destination"]: m for m in attrs["Mounts"]}
        assert mounts["/mnt/ro"]["RW"] is False  # forced by the ':ro' prefix
        assert mounts["/home/work/rw"]["RW"] is True
        assert mounts["/home/work/data"]["Source"] == f"{tmp_path}/folders/alice/data"
    # sshd still works with the capabilities left, and the ro mount is read-only inside.
    result = await mgr.exec(session.id, ["sh", "-c", "ssh -o BatchMode=yes sub1 hostname"])
    assert result.exit_code == 0 and result.output.strip() == "sub1", result.output
    result = await mgr.exec(session.id, ["touch", "/mnt/ro/x"])
    assert result.exit_code != 0 and "Read-only" in result.output
    # Raw sockets (NET_RAW) and device nodes (MKNOD) are gone; a setuid bit grants nothing.
    result = await mgr.exec(session.id, ["mknod", "/tmp/null2", "c", "1", "3"])
    assert result.exit_code != 0, result.output
    status = await mgr.exec(session.id, ["grep", "NoNewPrivs", "/proc/self/status"])
    assert status.output.split() == ["NoNewPrivs:", "1"]


async def test_local_backend_applies_the_same_policy(tmp_path: Path) -> None:
    """The local agent goes through the manager: same refusals, own folder made there."""
    manager = BaiSessionManager(
        store_url=f"sqlite:///{tmp_path}/store.sqlite",
        backend="local",
        data_folders_root=str(tmp_path / "folders"),
        config=Config({"LocalAgent": {"root": str(tmp_path / "kernels")}}),
        pass_interval=0.5,
    )
    await manager.start()
    try:
        for entry in ("/", "/proc", f"{tmp_path}:/mnt/t", f"{tmp_path}/kernels:/mnt/k"):
            with pytest.raises(InvalidRequest, match="mounts:"):
                await manager.create({"mounts": [entry]}, "alice")
        session = await manager.create(
            {"type": "batch", "startup_command": "ls -d data", "mounts": ["data"]}, "..", None
        )
        done = await manager.wait_for(session.id, {Status.TERMINATED}, timeout=60)
        assert done.exit_code == 0, done.status_data
        assert [p.name for p in (tmp_path / "folders").iterdir()] == [owner_dir("..")]
    finally:
        await manager.stop()
