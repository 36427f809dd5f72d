"""System sessions (SFTP) and idle rules through a real Jupyter server, Docker and clients.

The server is shared by alice, bob and an admin (token users). alice reaches
her data folders with the real ``sftp`` client; bob's sessions have a short
``idle_timeout`` (a policy of his), fed by the activity call, the service-port
proxy and an open SFTP connection, and shown by the API and ``%bai status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from conftest import make_manager, skip_or_fail, started_manager
from harness.server import MULTI_USER, Server, end_all, start_server
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from bai_jupyter.errors import Conflict, InvalidRequest
from bai_jupyter.model import SessionResult, Status

pytestmark = pytest.mark.timeout(240)

SMALL = {"cpu": "0.25", "mem": "128m"}
IDLE_TIMEOUT = 6
CONFIG = (
    MULTI_USER
    + f"""
c.BaiSessionManager.backend = "docker"
c.BaiSessionManager.watchdog_interval = 0.2
c.BaiJupyterApp.activity_interval = 0.2
c.BaiSessionManager.policies = {{"users": {{"bob": {{"idle_timeout": {IDLE_TIMEOUT}}}}}}}
"""
)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bai-sftp")


@pytest.fixture(scope="module")
def server(kernel_image: str, root: Path) -> Iterator[Server]:
    for tool in ("sftp", "scp", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            skip_or_fail(f"no {tool} (apt-get install openssh-client)")
    running = start_server(root, CONFIG)
    try:
        yield running
    finally:
        for token in ("alice-token", "bob-token"):
            running.token = token
            end_all(running)
        running.stop()


async def _view(server: Server, token: str, key: str, query: str = "") -> dict[str, Any]:
    reply = await server.fetch("GET", f"bai/api/v1/sessions/{key}{query}", token=token)
    assert reply.code == 200, reply.body
    view: dict[str, Any] = json.loads(reply.body)
    return view


def _ssh_options(tmp: Path, sftp: dict[str, Any], key: Path) -> list[str]:
    known = tmp / "known_hosts"
    known.write_text(sftp["known_hosts"] + "\n")
    return [
        "-i",
        str(key),
        "-o",
        f"UserKnownHostsFile={known}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
    ]


async def _run(*argv: str, stdin: str = "") -> tuple[int, str]:
    """A client command; its exit code and its output (stdout and stderr)."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(stdin.encode()), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


def _rsync(sftp: dict[str, Any], options: list[str], *paths: str, flags: str = "-a") -> list[str]:
    """The rsync client through the session's rsync login; ``::module/…`` paths are the
    session's (``rsync@host::module/…``)."""
    login = f"rsync@{sftp['host']}"
    shell = shlex.join(["ssh", "-p", str(sftp["port"]), *options])
    return ["rsync", flags, "-e", shell, *(login + p if p.startswith("::") else p for p in paths)]


def _sftp(sftp: dict[str, Any], options: list[str]) -> list[str]:
    """The sftp client reading commands from its standard input."""
    return ["sftp", "-b", "-", "-P", str(sftp["port"]), *options, f"{sftp['user']}@{sftp['host']}"]


@pytest.mark.docker
@pytest.mark.slow
async def test_sftp_reaches_only_the_owners_folders(
    server: Server, root: Path, tmp_path: Path, no_rsync_image: str
) -> None:
    theirs = root / "folders" / "bob" / "private"
    theirs.mkdir(parents=True)
    (theirs / "secret.txt").write_text("bob's\n")
    alice = server.client("alice-token")
    # An image of the user's that has no rsync (SFTP needs only openssh-server).
    request = {"type": "system", "image": no_rsync_image, "mounts": ["data"], "resources": SMALL}
    made = await alice.create(request)
    assert (await alice.wait_for(made.id, {Status.RUNNING}, timeout=90)).status is Status.RUNNING

    # The login: for everyone who may read the session, the key only for its owner.
    shown = (await _view(server, "alice-token", made.id))["sftp"]
    assert set(shown) == {"host", "port", "user", "known_hosts", "command", "rsync"}
    assert shown["user"] == "work" and shown["host"] == "127.0.0.1"
    sftp = (await _view(server, "alice-token", made.id, "?connection=true"))["sftp"]
    assert sftp["private_key"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    listed = json.loads(
        (await server.fetch("GET", "bai/api/v1/sessions", token="alice-token")).body
    )
    assert "private_key" not in json.dumps(listed)
    bob = await server.fetch("GET", f"bai/api/v1/sessions/{made.id}", token="bob-token")
    assert bob.code == 404
    admin = await server.fetch(
        "GET", f"bai/api/v1/sessions/{made.id}?connection=true", token="admin-token"
    )
    assert admin.code == 403

    key = tmp_path / "key"
    key.write_text(sftp["private_key"])
    key.chmod(0o600)
    options = _ssh_options(tmp_path, sftp, key)
    (tmp_path / "upload.txt").write_text("sent over sftp\n")
    batch = f"put {tmp_path}/upload.txt data/upload.txt\nls -1 /\ncd ..\nls -1\n"
    code, out = await _run(*_sftp(sftp, options), stdin=batch)
    assert code == 0, out
    listed = [line.lstrip("/") for line in out.splitlines() if not line.startswith("sftp>")]
    assert listed == ["data", "data"]  # its root holds the data folders; nothing above it
    assert (root / "folders" / "alice" / "data" / "upload.txt").read_text() == "sent over sftp\n"
    (tmp_path / "copied.txt").write_text("sent by scp\n")  # scp speaks SFTP underneath
    target = f"{sftp['user']}@{sftp['host']}:data/copied.txt"
    code, out = await _run(
        "scp", "-P", str(sftp["port"]), *options, f"{tmp_path}/copied.txt", target
    )
    assert code == 0, out
    assert (root / "folders" / "alice" / "data" / "copied.txt").read_text() == "sent by scp\n"

    # Nothing of bob's, however it is named; no shell, no forwarding.
    for path in ("/../bob/private/secret.txt", "../../bob/private/secret.txt"):
        code, out = await _run(*_sftp(sftp, options), stdin=f"get {path} {tmp_path}/got\n")
        assert code != 0 and not (tmp_path / "got").exists(), out
    where = f"{sftp['user']}@{sftp['host']}"
    code, out = await _run("ssh", "-p", str(sftp["port"]), *options, where, "cat /etc/passwd")
    assert code != 0 and "sftp connections only" in out and "root:" not in out
    code, out = await _run("ssh", "-p", str(sftp["port"]), *options, "-W", "127.0.0.1:2200", where)
    assert code != 0 and "prohibited" in out, out
    # This image has no rsync: its login says so (and runs nothing else).
    code, out = await _run(*_rsync(sftp, options, f"{tmp_path}/upload.txt", "::work/data/"))
    assert code != 0 and "the image of this system session has no rsync" in out, out

    # A compute session mounting the folder reads what came in.
    job = await alice.create(
        {"type": "batch", "mounts": ["data"], "resources": SMALL, "startup_command": "cat data/*"}
    )
    done = await alice.wait_for(job.id, {Status.TERMINATED}, timeout=90)
    assert done.result is SessionResult.SUCCESS
    assert "sent over sftp" in await alice.logs(job.id)


@pytest.fixture(scope="module")
def no_rsync_image(kernel_image: str, docker_engine: Any) -> str:
    """The kernel image without its rsync (as an image of the user's may be); made once."""
    kernel = docker_engine.api.inspect_image(kernel_image)
    image = f"bai-jupyter/test-no-rsync:{kernel['Id'].split(':')[1][:12]}"
    with contextlib.suppress(docker.errors.ImageNotFound):
        docker_engine.api.inspect_image(image)
        return image
    made = docker_engine.api.create_container(kernel_image, command=["rm", "/usr/bin/rsync"])
    try:
        docker_engine.api.start(made["Id"])
        assert docker_engine.api.wait(made["Id"])["StatusCode"] == 0
        cmd = json.dumps(kernel["Config"]["Cmd"])  # the kernel image's, not the removal's
        docker_engine.api.commit(made["Id"], *image.split(":"), changes=[f"CMD {cmd}"])
    finally:
        docker_engine.api.remove_container(made["Id"], force=True)
    return image


@pytest.mark.docker
@pytest.mark.slow
async def test_rsync_over_ssh_reaches_only_the_data_folders(
    server: Server, root: Path, tmp_path: Path
) -> None:
    if shutil.which("rsync") is None:
        skip_or_fail("no rsync client (apt-get install rsync)")
    alice = server.client("alice-token")
    request = {"type": "system", "mounts": ["synced"], "resources": SMALL}  # the default image
    made = await alice.create(request)
    assert (await alice.wait_for(made.id, {Status.RUNNING}, timeout=90)).status is Status.RUNNING
    sftp = (await _view(server, "alice-token", made.id, "?connection=true"))["sftp"]
    where = f"rsync@{sftp['host']}::work/FOLDER/"
    assert sftp["rsync"] == f"rsync -a -e 'ssh -p {sftp['port']} -i KEY_FILE' LOCAL_DIR/ {where}"
    key = tmp_path / "key"
    key.write_text(sftp["private_key"])
    key.chmod(0o600)
    options = _ssh_options(tmp_path, sftp, key)

    sent = tmp_path / "sent"
    (sent / "sub").mkdir(parents=True)
    (sent / "a.txt").write_text("sent by rsync\n")
    (sent / "sub" / "b.txt").write_text("and its folder\n")
    code, out = await _run(*_rsync(sftp, options, f"{sent}/", "::work/synced/up/"))
    assert code == 0, out
    folder = root / "folders" / "alice" / "synced"
    assert (folder / "up" / "sub" / "b.txt").read_text() == "and its folder\n"
    code, out = await _run(*_rsync(sftp, options, "::work/synced/up/", f"{tmp_path}/back/"))
    assert code == 0, out
    assert (tmp_path / "back" / "a.txt").read_text() == "sent by rsync\n"

    # rsync's daemon is chrooted to the data folders: a symlink a kernel left there (to the
    # runtime's files, with the session's keys), followed (-L), and a path above the
    # module lead to nothing outside them.
    (folder / "keys").symlink_to("/home/config")
    got = tmp_path / "got"
    for path, flags in (("::work/synced/keys/", "-aL"), ("::work/../../etc/passwd", "-a")):
        code, out = await _run(*_rsync(sftp, options, path, f"{got}/", flags=flags))
        assert code != 0, out
        assert not got.exists() or not any(got.iterdir()), out
    # No command but rsync's daemon runs for this login.
    login = f"rsync@{sftp['host']}"
    code, out = await _run("ssh", "-p", str(sftp["port"]), *options, login, "cat /etc/passwd")
    assert "@RSYNCD:" in out and "root:" not in out, out


@pytest.mark.docker
@pytest.mark.slow
async def test_sftp_with_the_owners_own_key(server: Server, tmp_path: Path) -> None:
    alice = server.client("alice-token")
    bad = await server.fetch(
        "POST",
        "bai/api/v1/sessions",
        {"type": "system", "ssh_public_key": "not a key"},
        token="alice-token",
    )
    assert bad.code == 400 and b"ssh_public_key" in bad.body
    code, out = await _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k"))
    assert code == 0, out
    made = await alice.create(
        {
            "type": "system",
            "mounts": ["data"],
            "resources": SMALL,
            "ssh_public_key": (tmp_path / "k.pub").read_text(),
        }
    )
    assert (await alice.wait_for(made.id, {Status.RUNNING}, timeout=90)).status is Status.RUNNING
    sftp = (await _view(server, "alice-token", made.id, "?connection=true"))["sftp"]
    assert sftp["private_key"] is None  # the owner holds it
    options = _ssh_options(tmp_path, sftp, tmp_path / "k")
    code, out = await _run(*_sftp(sftp, options), stdin="ls -1 /\n")
    assert code == 0 and "data" in out, out
    await alice.destroy(made.id)


async def test_a_system_session_takes_no_code_and_the_api_runs_nothing_in_it(
    server: Server,
) -> None:
    """The docs say "no shell, no code": what would run code is refused at create, and so
    are the API's exec and service ports."""
    sessions = "bai/api/v1/sessions"
    for field, value in (
        ("env", {"PYTHONPATH": "/home/work/data"}),
        ("service_ports", ["web:http:8080"]),
        ("startup_command", "python3 -m http.server"),
    ):
        request = {"type": "system", "mounts": ["data"], field: value}
        reply = await server.fetch("POST", sessions, request, token="alice-token")
        assert reply.code == 400, (field, reply.body)
        assert json.loads(reply.body)["message"].startswith(f"{field}: not allowed"), reply.body
    alice = server.client("alice-token")
    made = await alice.create({"type": "system", "mounts": ["data"], "resources": SMALL})
    assert (await alice.wait_for(made.id, {Status.RUNNING}, timeout=90)).status is Status.RUNNING
    for path, call in (
        ("exec", {"command": ["id", "-u"]}),
        ("services", {"service_port": "web:http:8080"}),
    ):
        reply = await server.fetch("POST", f"{sessions}/{made.id}/{path}", call, "alice-token")
        assert reply.code == 403, (path, reply.body)
        assert "system (SFTP-only) session" in json.loads(reply.body)["message"]
    # Refused, not broken: it keeps serving (the idle watch's own look at its open SFTP
    # connections goes to the agent directly: test_idle_timeout_fed_by_… below).
    assert (await alice.get(made.id)).status is Status.RUNNING
    await alice.destroy(made.id)


def _status_text(
    server: Server, monkeypatch: pytest.MonkeyPatch, token: str, line: str, own: str | None
) -> str:
    """``%bai LINE`` in a kernel of session ``own`` (None: of no session; an IPython shell)."""
    monkeypatch.setenv("BAI_JUPYTER_URL", server.url)
    monkeypatch.setenv("BAI_JUPYTER_TOKEN", token)
    if own is None:
        monkeypatch.delenv("BACKENDAI_SESSION_ID", raising=False)
    else:
        monkeypatch.setenv("BACKENDAI_SESSION_ID", own)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "bai_jupyter")
    with capture_output() as cap:
        shell.run_line_magic("bai", line)
    return cap.stdout


async def _idle(server: Server, session_id: str) -> dict[str, Any]:
    idle: dict[str, Any] = (await _view(server, "bob-token", session_id))["idle"]
    return idle


async def _first_idle(server: Server, session_id: str) -> dict[str, Any]:
    """The session's idle view once the watch has looked at it (within its interval)."""
    for _ in range(100):
        idle = await _idle(server, session_id)
        if idle:
            return idle
        await asyncio.sleep(0.1)
    raise AssertionError(f"no idle rules recorded for {session_id}")


Use = Callable[[], Awaitable[Callable[[], Awaitable[None]] | None]]


async def _used(server: Server, session_id: str, source: str, use: Use) -> None:
    """Once the session has been idle for a second, ``use`` it: then its idle view names
    ``source`` as what used it last (its deadline moved by more than the watch's slack).
    ``use`` may return how to stop using it (a connection held open meanwhile)."""
    for _ in range(100):
        if (await _idle(server, session_id))["idle_timeout"]["left"] < IDLE_TIMEOUT - 1:
            break
        await asyncio.sleep(0.1)
    stop = await use()
    try:
        for _ in range(100):
            idle = await _idle(server, session_id)
            if idle.get("activity") == source:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"{source} was not noted: {idle}")
    finally:
        if stop is not None:
            await stop()


@pytest.mark.docker
@pytest.mark.slow
async def test_idle_timeout_fed_by_the_api_the_proxy_and_sftp(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bob = server.client("bob-token")
    web = await bob.create({"resources": SMALL, "service_ports": ["web:http:8000"]})
    assert (await bob.wait_for(web.id, {Status.RUNNING}, timeout=90)).status is Status.RUNNING
    served = await bob.exec(web.id, ["sh", "-c", "python3 -m http.server 8000 >/dev/null 2>&1 &"])
    assert served.exit_code == 0

    idle = await _first_idle(server, web.id)
    assert idle["idle_timeout"]["timeout"] == IDLE_TIMEOUT
    assert idle["idle_timeout"]["source"] == "policies.users.bob"
    assert 0 < idle["idle_timeout"]["left"] <= IDLE_TIMEOUT

    async def call() -> None:  # an explicit activity call (RemoteManager → REST)
        await bob.touch(web.id, "notebook")

    await _used(server, web.id, "notebook", call)

    async def proxied() -> None:  # the service answers through the proxy once it listens
        for _ in range(100):
            page = await server.fetch("GET", f"bai/sessions/{web.id}/proxy/web/", token="bob-token")
            if page.code == 200:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"the proxy answered {page.code}: {page.body!r}")

    await _used(server, web.id, "proxy", proxied)

    text = await asyncio.to_thread(
        _status_text, server, monkeypatch, "bob-token", "status --text", web.id
    )
    assert f"(idle_timeout {IDLE_TIMEOUT} s)" in text and "idle for " in text, text

    # An open SFTP connection keeps a system session in use (made now: its idle_timeout
    # would end it while the steps above run).
    files = await bob.create({"type": "system", "resources": SMALL})
    assert (await bob.wait_for(files.id, {Status.RUNNING}, timeout=90)).status is Status.RUNNING
    await _first_idle(server, files.id)
    sftp = (await _view(server, "bob-token", files.id, "?connection=true"))["sftp"]
    key = tmp_path / "key"
    key.write_text(sftp["private_key"])
    key.chmod(0o600)
    options = _ssh_options(tmp_path, sftp, key)

    async def connected() -> Callable[[], Awaitable[None]]:
        held = await asyncio.create_subprocess_exec(
            "sftp", "-P", str(sftp["port"]), *options, f"{sftp['user']}@{sftp['host']}",
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

        async def close() -> None:
            held.kill()
            await held.wait()

        return close

    await _used(server, files.id, "sftp", connected)

    # Left alone, both end.
    for made in (web, files):
        ended = await bob.wait_for(made.id, {Status.TERMINATED}, timeout=60)
        assert ended.status_info == "idle-timeout"
        assert await _idle(server, made.id) == {}
    with pytest.raises(Conflict):
        await bob.touch(web.id)


async def _cli(server: Server, token: str, *args: str) -> tuple[int, str]:
    """``bai-jupyter session …`` as a person runs it, against this server."""
    where = ("--url", server.url, "--token", token)
    return await _run(sys.executable, "-m", "bai_jupyter.cli", "session", *args, *where)


@pytest.mark.docker
@pytest.mark.slow
async def test_the_command_line_makes_sessions_of_each_kind_and_an_sftp_login(
    server: Server, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch job to its result, a system session to its SFTP login files, then gone."""
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps({"type": "batch", "resources": SMALL, "startup_command": "echo cli-ran"})
    )
    code, out = await _cli(server, "alice-token", "create", str(job), "--wait")
    assert code == 0 and " batch · SUCCESS (exit code 0) " in out, out
    job_id = out.split()[1]
    code, out = await _cli(server, "alice-token", "logs", job_id)
    assert code == 0 and "cli-ran\n" in out, out
    code, last = await _cli(server, "alice-token", "logs", job_id, "--tail", "1")
    assert code == 0 and last == out.splitlines(keepends=True)[-1], last

    files = tmp_path / "files.json"
    files.write_text(
        json.dumps({"type": "system", "name": "cli-files", "mounts": ["data"], "resources": SMALL})
    )
    code, out = await _cli(server, "alice-token", "create", str(files), "--wait")
    assert code == 0 and "system · RUNNING" in out and "sftp: sftp -P" in out, out
    code, out = await _cli(server, "alice-token", "list")
    assert code == 0 and "cli-files" in out and "RUNNING" in out, out
    shown = await asyncio.to_thread(
        _status_text, server, monkeypatch, "alice-token", "status cli-files --text", None
    )
    assert "system · RUNNING" in shown and "sftp: sftp -P" in shown, shown
    code, out = await _cli(server, "bob-token", "sftp", "cli-files", "--dir", str(tmp_path))
    assert code == 1 and "not-found" in out and not (tmp_path / "cli-files.key").exists(), out
    code, out = await _cli(server, "alice-token", "sftp", "cli-files", "--dir", str(tmp_path))
    assert code == 0, out
    key = tmp_path / "cli-files.key"
    assert key.stat().st_mode & 0o777 == 0o600 and "PRIVATE KEY" not in out
    sftp_line, rsync_line = out.splitlines()
    *options, login = sftp_line.split()  # sftp -P PORT -o UserKnownHostsFile=… -i KEY work@HOST
    command = [*options, "-b", "-", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", login]
    (tmp_path / "up.txt").write_text("via the command line\n")
    code, out = await _run(*command, stdin=f"put {tmp_path}/up.txt data/cli-up.txt\n")
    assert code == 0, out
    assert (
        root / "folders" / "alice" / "data" / "cli-up.txt"
    ).read_text() == "via the command line\n"
    # The rsync line as printed, with a folder of one's own and a data folder filled in.
    (tmp_path / "tree" / "deep").mkdir(parents=True)
    (tmp_path / "tree" / "deep" / "r.txt").write_text("via rsync\n")
    rsync = rsync_line.replace("LOCAL_DIR", str(tmp_path / "tree")).replace("FOLDER", "data/tree")
    code, out = await _run(*shlex.split(rsync.replace("ssh -p", "ssh -o BatchMode=yes -p")))
    assert code == 0, out
    assert (root / "folders" / "alice" / "data" / "tree" / "deep" / "r.txt").read_text() == (
        "via rsync\n"
    )
    code, out = await _cli(server, "alice-token", "delete", "cli-files")
    assert code == 0 and "TERMINATED (user-requested)" in out, out


async def test_a_system_session_needs_an_agent_that_serves_sftp(tmp_path: Path) -> None:
    """The local backend runs processes: it has no SFTP server to give, and says so."""
    async with started_manager(make_manager(tmp_path, "local")) as mgr:
        with pytest.raises(InvalidRequest, match="needs an agent that serves SFTP"):
            await mgr.create({"type": "system", "mounts": ["data"]}, "alice")
