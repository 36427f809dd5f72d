"""The mount policy: host paths only from the operator's allow-list, never the host's own.

Unit tests of :class:`MountPolicy`, then the manager against the real Docker engine:
refused at create, re-checked when the session starts, read-only where forced, no host
directory created, and the containers' capabilities and security options.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import make_manager
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from traitlets import TraitError
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
    make_folder,
    owner_dir,
    parse_mount,
    parse_prefixes,
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
    policy = _policy(tmp_path, [f"{tmp_path}:ro"], [str(store)])
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
    policy = _policy(tmp_path, [f"{allowed}:ro"])
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
    assert not _check(policy, f"{tmp_path}/rw").read_only
    assert _check(policy, f"{tmp_path}/rw:ro").read_only
    assert _check(policy, f"{tmp_path}/ro/b:/mnt/b:rw").read_only  # forced
    with pytest.raises(MountRefused, match="allowed_host_paths"):
        _check(policy, f"{tmp_path}/rwx")  # a prefix is a directory, not a string
    with pytest.raises(MountRefused, match=r"allowed_host_paths \(none configured\)"):
        _check(_policy(tmp_path, []), f"{tmp_path}/rw")
    with pytest.raises(ValueError, match="use /prefix"):
        MountPolicy.build(["relative"], [], tmp_path)


def test_data_folders_are_the_owners_own(tmp_path: Path) -> None:
    policy = _policy(tmp_path, ["/:ro"])
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


def test_host_paths_in_the_data_folders_are_refused_name_the_folder(tmp_path: Path) -> None:
    """The owner's own folders too, and for an admin: a kernel writes there (swappable)."""
    folders = tmp_path / "folders"
    (folders / "alice" / "d1" / "race").mkdir(parents=True)
    policy = _policy(tmp_path, ["/:ro"])
    for path, words in {
        folders / "alice" / "d1" / "race": 'name the folder instead, "d1"',
        folders / "alice" / "d1": 'name the folder instead, "d1"',
        folders / "alice": "each by its name",
        folders / "bob" / "d1": "another user's",
        folders: "contains every user's data folders",
    }.items():
        for admin in (False, True):
            with pytest.raises(MountRefused, match=words):
                policy.check(Mount(str(path), "/mnt/x"), "alice", any_host_path=admin)
    assert _check(policy, "d1").source == str(folders / "alice" / "d1")


def test_a_named_folder_is_never_a_symlink_nor_made_through_one(tmp_path: Path) -> None:
    folders = tmp_path / "folders"
    (folders / "alice").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (folders / "alice" / "d1").symlink_to("/")
    (folders / "alice" / "d2").symlink_to(folders / "alice" / "d3")
    (folders / "bob").symlink_to(tmp_path / "elsewhere")  # the owner's dir itself
    policy = _policy(tmp_path, [])
    for owner, name in (("alice", "d1"), ("alice", "d2"), ("bob", "d1")):
        with pytest.raises(MountRefused, match="not a symlink"):
            _check(policy, name, owner)
        with pytest.raises(MountRefused, match="not a directory of its own"):
            make_folder(folders, owner, name)
    assert not (folders / "alice" / "d3").exists() and not list((tmp_path / "elsewhere").iterdir())
    make_folder(folders, "carol", "d1")
    make_folder(folders, "carol", "d1")  # made once, found again
    assert _check(policy, "d1", "carol").source == str(folders / "carol" / "d1")


def test_below_a_read_write_prefix_only_the_prefix_itself_below_a_read_only_one_any(
    tmp_path: Path,
) -> None:
    (tmp_path / "rw" / "sub").mkdir(parents=True)
    (tmp_path / "ro" / "sub").mkdir(parents=True)
    (tmp_path / "ro" / "into-rw").symlink_to(tmp_path / "rw" / "sub")
    policy = _policy(tmp_path, [f"{tmp_path}/rw", f"{tmp_path}/ro:ro"])
    assert _check(policy, f"{tmp_path}/rw").source == f"{tmp_path}/rw"
    for admin in (False, True):  # an admin's request too: another user's kernel writes there
        for path in (f"{tmp_path}/rw/sub", f"{tmp_path}/ro/into-rw", f"{tmp_path}/rw/sub/../sub"):
            with pytest.raises(MountRefused, match=rf"inside {tmp_path}/rw, which kernels may"):
                policy.check(Mount(path, "/mnt/x"), "alice", any_host_path=admin)
        below_ro = policy.check(Mount(f"{tmp_path}/ro/sub", "/mnt/x"), "alice", admin)
        assert below_ro.read_only  # forced: no kernel ever writes below a read-only prefix
    # A read-write mount never holds a directory that sessions mount (an admin's wider one).
    (tmp_path / "srv" / "data").mkdir(parents=True)
    wide = _policy(tmp_path, [f"{tmp_path}/srv/data"])
    with pytest.raises(MountRefused, match=r"contains .*/srv/data, which sessions mount"):
        wide.check(Mount(f"{tmp_path}/srv", "/mnt/x"), "alice", any_host_path=True)
    assert wide.check(Mount(f"{tmp_path}/srv", "/mnt/x", read_only=True), "alice", True)


def test_a_prefix_inside_a_read_write_prefix_is_a_configuration_error() -> None:
    for entries in (["/srv", "/srv/x:ro"], ["/srv/x", "/srv"], ["/srv:rw", "/srv/a/b"]):
        with pytest.raises(ValueError, match="inside the read-write prefix /srv"):
            parse_prefixes(entries)
        with pytest.raises(TraitError, match="inside the read-write prefix /srv"):
            BaiSessionManager(allowed_host_paths=entries)
    assert parse_prefixes(["/srv:ro", "/srv/x", "/srv/y:ro", "/srvx"]) == [
        ("/srv", True),
        ("/srv/x", False),
        ("/srv/y", True),
        ("/srvx", False),
    ]


def test_nothing_inside_the_mounted_notebook_root(tmp_path: Path) -> None:
    """Every notebook kernel writes in the notebook root: only the root itself is mounted."""
    (tmp_path / "nb" / "sub").mkdir(parents=True)
    policy = MountPolicy.build(
        [f"{tmp_path}/nb:ro"], [], tmp_path / "folders", writable=[str(tmp_path / "nb")]
    )
    root = policy.check(Mount(str(tmp_path / "nb"), "/home/work/notebooks"), "alice", True)
    assert not root.read_only
    with pytest.raises(MountRefused, match="which kernels may write"):
        _check(policy, f"{tmp_path}/nb/sub:/mnt/x:ro")


_PART = st.sampled_from(["a", "b", "f", "alice", "bob"])
_PATH = st.lists(_PART, min_size=0, max_size=4).map(lambda p: "/".join(["/nonexistent-bai", *p]))


@settings(max_examples=300, deadline=None)
@given(
    prefixes=st.lists(st.tuples(_PATH, st.booleans()), max_size=3),
    notebooks=st.none() | _PATH,
    asked=st.lists(st.tuples(_PATH | st.sampled_from(["d1", "d2"]), st.booleans()), max_size=4),
    admin=st.booleans(),
)
def test_no_accepted_path_lies_where_a_kernel_could_swap_it(
    prefixes: list[tuple[str, bool]],
    notebooks: str | None,
    asked: list[tuple[str, bool]],
    admin: bool,
) -> None:
    """Whatever the configuration and the request, an accepted source is never strictly
    inside a directory kernels write (a read-write prefix, the notebook root) nor inside the
    data folders unless it is exactly a named folder ``<root>/<owner>/<name>``; and a
    read-write mount never holds a directory that sessions mount."""
    allowed = [f"{path}:ro" if ro else path for path, ro in prefixes]
    try:
        parse_prefixes(allowed)
    except ValueError:
        assume(False)
    root = "/nonexistent-bai/f"
    policy = MountPolicy.build(allowed, [], root, [notebooks] if notebooks else [])
    writable = [p for p, ro in prefixes if not ro] + ([notebooks] if notebooks else [])
    # What a kernel can write: a top that is itself mountable (never one holding, or inside,
    # the data folders).
    live = [t for t in writable if not _inside(t, root) and not _inside(root, t)]
    for entry, read_only in asked:
        spec = f"{entry}:ro" if read_only else entry
        try:
            mount = policy.check(parse_mount(spec, "alice", Path(root)), "alice", admin)
        except MountRefused:
            continue
        assert not any(mount.source.startswith(top + "/") for top in live), mount
        if _inside(mount.source, root):
            assert mount.folder and Path(mount.source).parent == Path(root, "alice"), mount
        if not mount.read_only:
            held = [p for p, _ in prefixes] + writable
            mountable = [p for p in held if not any(p.startswith(w + "/") for w in writable)]
            assert not any(p.startswith(mount.source + "/") for p in mountable), mount
        if not admin and not mount.folder:
            assert any(_inside(mount.source, p) for p, _ in prefixes), mount


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


# --- the manager and the engine ---------------------------------------------------------------


@pytest.fixture
async def mgr(tmp_path: Path, kernel_image: str) -> AsyncIterator[BaiSessionManager]:
    """Not conftest's ``make_manager``: Docker with a disk limit and two allowed host paths
    (``rw``, ``ro``), its store in a folder of its own."""
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
    missing = tmp_path / "allowed" / "ro" / "not-there"
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
    manager = make_manager(tmp_path, "local")
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


# --- a path swapped for a symlink to / while the session is held in CREATING ---------------


async def _swap_while_creating(
    mgr: BaiSessionManager,
    monkeypatch: pytest.MonkeyPatch,
    request: dict[str, Any],
    swap: Callable[[], Awaitable[object]],
) -> str:
    """Create ``request`` as alice, hold it in CREATING (the agent's start waits), run
    ``swap`` then and let it start: the batch's output, or ``refused: <why>``."""
    agent = next(iter(mgr.core.agents.values()))
    creating, release = asyncio.Event(), asyncio.Event()
    start = agent.start_kernels

    async def held(session_id: str, plans: list[Any]) -> Any:
        creating.set()
        await release.wait()
        return await start(session_id, plans)

    with monkeypatch.context() as patch:
        patch.setattr(agent, "start_kernels", held)
        try:
            made = await mgr.create({"type": "batch", **SMALL, **request}, "alice")
        except InvalidRequest as exc:
            return f"refused: {exc}"
        await asyncio.wait_for(creating.wait(), 60)
        assert (await mgr.get(made.id)).status is Status.CREATING
        await swap()
        release.set()
        done = await mgr.wait_for(made.id, set(), timeout=120)
    assert done.status is Status.TERMINATED, (done.status_info, done.status_data)
    return await mgr.logs(made.id)


SMALL = {"resources": {"cpu": "0.5", "mem": "256m"}}


def _looks_for_the_host(marker: Path, at: str) -> str:
    """A startup command: says whether the host's ``/`` (a marker file placed outside every
    folder, or the engine's socket) is visible under ``at``."""
    return (
        f"if [ -e {at}{marker} ] || [ -S {at}/run/docker.sock ]; "
        f"then echo HOST-ROOT-SEEN; else echo host-root-unseen; fi; ls {at}"
    )


def _race_pair(where: Path) -> None:
    """``race`` a directory, ``race_l`` a symlink to ``/`` beside it (the swap to come)."""
    (where / "race").mkdir(parents=True)
    (where / "race_l").symlink_to("/")


def _swap(where: Path) -> None:
    """``race_l`` put in ``race``'s place (rename cannot put a link over a directory)."""
    (where / "race").rename(where / "race_was")
    (where / "race_l").rename(where / "race")


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    path = tmp_path.resolve() / "outside-every-folder"
    path.write_text("the host's file system\n")
    return path


@pytest.mark.docker
async def test_a_host_path_in_the_owners_folder_is_refused_so_a_swap_cannot_reach_the_host(
    mgr: BaiSessionManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: Path
) -> None:
    d1 = tmp_path / "folders" / "alice" / "d1"
    _race_pair(d1)
    seen = await _swap_while_creating(
        mgr,
        monkeypatch,
        {
            "mounts": [f"{d1}/race:/home/work/x:ro"],
            "startup_command": _looks_for_the_host(marker, "/home/work/x"),
        },
        lambda: asyncio.to_thread(_swap, d1),
    )
    assert "HOST-ROOT-SEEN" not in seen, seen
    assert seen.startswith("refused: mounts: ") and 'name the folder instead, "d1"' in seen, seen


@pytest.mark.docker
async def test_a_named_folder_is_mounted_at_its_root_so_no_swap_reaches_the_host(
    mgr: BaiSessionManager,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    marker: Path,
    docker_engine: Any,
) -> None:
    """A swap inside the folder stays inside it; the folder itself is the manager's: a kernel
    cannot rename it, nor reach the owner's directory to swap it (refused as a host path)."""
    folders = tmp_path / "folders"
    d1 = folders / "alice" / "d1"
    _race_pair(d1)
    # A kernel that would hold the owner's directory, to swap the folder itself: none.
    mine = await _swap_while_creating(
        mgr,
        monkeypatch,
        {
            "mounts": [f"{folders}/alice:/mnt/mine"],
            "startup_command": "cd /mnt/mine && mv d1 d1_was && ln -s / d1",
        },
        lambda: asyncio.sleep(0),
    )
    assert mine.startswith("refused: mounts: ") and "each by its name" in mine, mine
    holder = await mgr.create({**SMALL, "mounts": ["d1"]}, "alice")
    assert (await mgr.wait_for(holder.id, {Status.RUNNING}, timeout=120)).status is Status.RUNNING
    moved = await mgr.exec(holder.id, ["mv", "/home/work/d1", "/home/work/moved"])
    assert moved.exit_code != 0 and "busy" in moved.output, moved.output

    async def swap() -> None:  # what a kernel holding d1 can do: inside it, and no more
        swapped = await mgr.exec(
            holder.id, ["sh", "-c", "cd /home/work/d1 && mv race race_was && mv race_l race"]
        )
        assert swapped.exit_code == 0, swapped.output

    seen = await _swap_while_creating(
        mgr,
        monkeypatch,
        {"mounts": ["d1:ro"], "startup_command": _looks_for_the_host(marker, "/home/work/d1/race")},
        swap,
    )
    assert "host-root-unseen" in seen and "HOST-ROOT-SEEN" not in seen, seen
    assert (d1 / "race").is_symlink() and (folders / "alice" / "d1").is_dir()
    for kernel in (await mgr.get(holder.id)).kernels:
        mounts = docker_engine.containers.get(kernel.container_id).attrs["Mounts"]
        assert [m["Source"] for m in mounts if m["Destination"] == "/home/work/d1"] == [str(d1)]


@pytest.mark.docker
async def test_below_a_read_write_prefix_refused_below_a_read_only_one_read_only(
    mgr: BaiSessionManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: Path
) -> None:
    rw, ro = tmp_path / "allowed" / "rw", tmp_path / "allowed" / "ro"
    _race_pair(rw)
    seen = await _swap_while_creating(
        mgr,
        monkeypatch,
        {
            "mounts": [f"{rw}/race:/home/work/x:ro"],
            "startup_command": _looks_for_the_host(marker, "/home/work/x"),
        },
        lambda: asyncio.to_thread(_swap, rw),
    )
    assert "HOST-ROOT-SEEN" not in seen, seen
    assert seen.startswith("refused: mounts: ") and f"only {rw} itself" in seen, seen
    # Below a read-only prefix any directory, read-only whatever was asked: no kernel makes
    # the symlink there, nor renames anything.
    (ro / "race").mkdir()
    seen = await _swap_while_creating(
        mgr,
        monkeypatch,
        {
            "mounts": [f"{ro}/race:/home/work/x:rw", f"{ro}:/home/work/ro"],
            "startup_command": "cd /home/work/ro; ln -s / race_l; mv race r2; touch ../x/f",
        },
        lambda: asyncio.sleep(0),
    )
    assert seen.count("Read-only file system") == 3, seen
    assert sorted(p.name for p in ro.iterdir()) == ["race"]
