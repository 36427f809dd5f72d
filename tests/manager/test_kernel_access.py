"""Kernel tokens: one per session, checked against the store, dying with it or when revoked.

The integration tests act as code in a kernel would: a genuine token (minted with
the store's secret, as the server mints it for a kernel) against the kernel-access
listener of a real multi-user server (local backend: it listens on loopback).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from harness.server import MULTI_USER, Server, start_server
from hypothesis import given
from hypothesis import strategies as st

from bai_jupyter.manager.requests.tokens import TokenSigner
from bai_jupyter.store import Store
from bai_jupyter.store.tables import sessions_table

FUTURE = time.time() + 86400 * 365
_LOCAL = 'c.BaiSessionManager.backend = "local"\n'


@given(st.text(alphabet="0123456789abcdef-", min_size=1, max_size=40), st.integers(0, 2**45))
def test_a_token_names_its_session(session_id: str, issued: int) -> None:
    tokens = TokenSigner("secret")
    assert tokens.parse(tokens.mint(session_id, issued)) == (session_id, issued)


def test_forged_or_foreign_tokens_name_nothing() -> None:
    tokens = TokenSigner("secret")
    a = tokens.mint("aaaa", 1000)
    mac = a.rsplit(".", 1)[1]
    for token in (
        None,
        "",
        "aaaa",
        a + "0",
        f"bai2.bbbb.1000.{mac}",  # another session with a's signature
        f"bai2.aaaa.2000.{mac}",  # a later issue time with a's signature
        TokenSigner("other").mint("aaaa", 1000),  # another store's
        "bai2.!!!.00",
        "bai1.YWxpY2U.00",
    ):
        assert tokens.parse(token) is None, token


# --- against a real server ---------------------------------------------------------------------


def _kernel_side(server: Server) -> tuple[Server, TokenSigner]:
    """The server as kernels reach it (the listener its log names) and the store's tokens."""
    for _ in range(300):  # it opens once the manager knows its agents' host addresses
        found = re.search(r"kernels reach the API at (\S+)", server.log.read_text())
        if found:
            break
        time.sleep(0.1)
    assert found, server.tail()
    store = Store(f"sqlite:///{server.log.parent}/store.sqlite")
    try:
        secret = store.token_secret
    finally:
        store.close()
    return dataclasses.replace(server, url=found.group(1)), TokenSigner(secret)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("kernel-access"), MULTI_USER + _LOCAL)
    yield srv
    srv.stop()


async def _create(server: Server, token: str, **extra: Any) -> str:
    reply = await server.fetch(
        "POST", "bai/api/v1/sessions", {"starts_at": FUTURE, **extra}, token=token
    )
    assert reply.code == 201, reply.body
    session_id: str = json.loads(reply.body)["id"]
    return session_id


def _error(reply: Any) -> str:
    body = json.loads(reply.body)
    assert body["error"] == "forbidden", body
    message: str = body["message"]
    return message


async def test_a_token_grants_its_own_session_only(server: Server) -> None:
    kernel, tokens = _kernel_side(server)
    a = await _create(server, "alice-token", name="token-a")
    b = await _create(server, "alice-token", name="token-b")
    bobs = await _create(server, "bob-token")
    token = tokens.mint(a)
    api = "bai/api/v1/sessions"
    for path in (a, "token-a", f"{a}/logs"):
        reply = await kernel.fetch("GET", f"{api}/{path}", token=token)
        assert reply.code == 200, (path, reply.body)
    # Another session of the same owner, by id or by name, and another owner's: refused.
    for method, path in (
        ("GET", b),
        ("GET", "token-b"),
        ("GET", f"{b}/logs"),
        ("POST", f"{b}/interrupt"),
        ("POST", f"{b}/execute"),
        ("DELETE", b),
        ("DELETE", f"{b}/kernel-token"),
        ("GET", bobs),
    ):
        reply = await kernel.fetch(method, f"{api}/{path}", token=token)
        assert reply.code == 403, (method, path, reply.body)
        assert "only its own session" in _error(reply)
    assert (await server.client("alice-token").get(b)).status.is_terminal is False
    # The owner's list and templates; never the admin view of everyone's.
    listed = await kernel.fetch("GET", f"{api}?all=true", token=token)
    assert listed.code == 200
    owners = {s["owner"] for s in json.loads(listed.body)["sessions"]}
    assert owners == {"alice"}
    assert (await kernel.fetch("GET", "bai/api/v1/templates", token=token)).code == 200
    # By default a kernel token creates sessions for its owner, and manages what it made
    # (what `%bai run` in main1 needs); another token of the owner does not.
    made = await _create(kernel, token)
    assert (await server.client("alice-token").get(made)).owner == "alice"
    assert (await kernel.fetch("GET", f"{api}/{made}", token=token)).code == 200
    reply = await kernel.fetch("GET", f"{api}/{made}", token=tokens.mint(b))
    assert reply.code == 403 and "only its own session" in _error(reply)
    assert (await kernel.fetch("DELETE", f"{api}/{made}", token=token)).code == 200
    # Its own session: it may end it.
    assert (await kernel.fetch("DELETE", f"{api}/{a}", token=token)).code == 200


async def test_a_token_dies_with_its_session(server: Server) -> None:
    kernel, tokens = _kernel_side(server)
    a = await _create(server, "alice-token")
    token = tokens.mint(a)
    assert (await kernel.fetch("GET", f"bai/api/v1/sessions/{a}", token=token)).code == 200
    await server.client("alice-token").destroy(a)
    for method, path in (("GET", a), ("GET", ""), ("POST", "")):
        reply = await kernel.fetch(method, f"bai/api/v1/sessions/{path}".rstrip("/"), token=token)
        assert reply.code == 403, (method, path, reply.body)
        assert "has ended" in _error(reply)
    unknown = tokens.mint("0" * 32)
    reply = await kernel.fetch("GET", "bai/api/v1/sessions", token=unknown)
    assert reply.code == 403 and "does not exist" in _error(reply)


async def test_revoked_tokens_are_refused(server: Server) -> None:
    kernel, tokens = _kernel_side(server)
    a = await _create(server, "alice-token")
    token = tokens.mint(a)
    path = f"bai/api/v1/sessions/{a}"
    assert (await kernel.fetch("GET", path, token=token)).code == 200
    # Only the owner (or an admin) revokes; bob does not even see the session.
    reply = await server.fetch("DELETE", f"{path}/kernel-token", token="bob-token")
    assert reply.code == 404
    assert (await kernel.fetch("GET", path, token=token)).code == 200
    reply = await server.fetch("DELETE", f"{path}/kernel-token", token="alice-token")
    assert reply.code == 200, reply.body
    assert json.loads(reply.body)["session_id"] == a
    reply = await kernel.fetch("GET", path, token=token)
    assert reply.code == 403 and "revoked" in _error(reply)
    reply = await kernel.fetch("GET", "bai/api/v1/sessions", token=token)
    assert reply.code == 403
    # A token issued after the revocation (a restarted kernel's) works.
    fresh = tokens.mint(a, int(time.time() * 1000) + 1000)
    assert (await kernel.fetch("GET", path, token=fresh)).code == 200
    # An admin may revoke anyone's.
    reply = await server.fetch("DELETE", f"{path}/kernel-token", token="admin-token")
    assert reply.code == 200
    await server.client("alice-token").destroy(a)


async def test_a_purged_session_leaves_no_kernel_token_record(server: Server) -> None:
    """Its revocation, and what its token created, go with the session's record."""
    kernel, tokens = _kernel_side(server)
    a = await _create(server, "alice-token")
    token = tokens.mint(a)
    child = await _create(kernel, token)
    assert (await kernel.fetch("GET", f"bai/api/v1/sessions/{child}", token=token)).code == 200
    for key in (a, child):
        path = f"bai/api/v1/sessions/{key}"
        reply = await server.fetch("DELETE", f"{path}/kernel-token", token="alice-token")
        assert reply.code == 200, reply.body
    owner = server.client("alice-token")
    for key in (a, child):
        await owner.destroy(key)
        await owner.purge(key)
    left: dict[str, list[Any]] = {}
    engine = sa.create_engine(f"sqlite:///{server.log.parent}/store.sqlite")
    try:
        with engine.connect() as conn:
            for table in sa.inspect(conn).get_table_names():
                rows = conn.exec_driver_sql(f'SELECT * FROM "{table}"')
                if found := [r for r in rows if a in repr(r) or child in repr(r)]:
                    left[table] = found
    finally:
        engine.dispose()
    assert left == {}


async def test_kernel_tokens_may_be_kept_from_creating_sessions(tmp_path: Path) -> None:
    config = MULTI_USER + _LOCAL + "c.BaiJupyterApp.kernel_tokens_create_sessions = False\n"
    server = start_server(tmp_path, config)
    try:
        kernel, tokens = _kernel_side(server)
        a = await _create(server, "alice-token")
        token = tokens.mint(a)
        reply = await kernel.fetch("POST", "bai/api/v1/sessions", {"starts_at": FUTURE}, token)
        assert reply.code == 403
        assert "kernel_tokens_create_sessions" in _error(reply)
        assert (await kernel.fetch("GET", "bai/api/v1/sessions", token=token)).code == 200
        assert [s.id for s in await server.client("alice-token").list_sessions()] == [a]
        await server.client("alice-token").destroy(a)
    finally:
        server.stop()


async def test_a_name_that_looks_like_an_id_is_refused_at_create(server: Server) -> None:
    """A child named ``<sibling id>`` would hold a token whose own name is the sibling's id."""
    kernel, tokens = _kernel_side(server)
    a = await _create(server, "alice-token")
    sibling = await _create(server, "alice-token")
    api = "bai/api/v1/sessions"
    for name in (sibling, sibling[:8], "deadbeef"):
        for door, token in ((kernel, tokens.mint(a)), (server, "alice-token")):
            body = {"starts_at": FUTURE, "name": name}
            reply = await door.fetch("POST", api, body, token=token)
            assert reply.code == 400, (name, reply.body)
            error = json.loads(reply.body)
            assert error["error"] == "invalid-request" and "name:" in error["message"], error
            assert "looks like a session id" in error["message"]
    # Names with a character no id has are names.
    for name in ("deadbeeg", "DEADBEEF", "abc1234", f"x{sibling[:31]}"):
        made = await _create(server, "alice-token", name=name)
        assert (await server.client("alice-token").get(name)).id == made
        await server.client("alice-token").destroy(made)
    for key in (a, sibling):
        await server.client("alice-token").destroy(key)


async def test_the_scope_check_and_the_handler_resolve_a_key_to_one_session(
    server: Server,
) -> None:
    """A session named like another's id, as an older version stored it: its token does
    not reach that other session (the scope check resolves the key as the handler does),
    it is reached by its own id only, and the server keeps serving it."""
    kernel, tokens = _kernel_side(server)
    sibling = await _create(server, "alice-token")
    odd = await _create(server, "alice-token", name="renamed-below")
    store = Store(f"sqlite:///{server.log.parent}/store.sqlite")
    try:
        with store.write() as tx:  # what an older version accepted as a name
            row = sessions_table.c
            spec = tx.conn.execute(sa.select(row.spec).where(row.id == odd)).scalar_one()
            tx.conn.execute(
                sa.update(sessions_table)
                .where(row.id == odd)
                .values(name=sibling, spec={**spec, "name": sibling})
            )
    finally:
        store.close()
    token = tokens.mint(odd)
    api = "bai/api/v1/sessions"
    for method, path in (
        ("GET", f"{sibling}?connection=true"),
        ("GET", sibling),
        ("POST", f"{sibling}/exec"),
        ("DELETE", sibling),
    ):
        reply = await kernel.fetch(method, f"{api}/{path}", token=token)
        assert reply.code == 403, (method, path, reply.body)
        assert "only its own session" in _error(reply)
    reply = await kernel.fetch("GET", f"{api}/{odd}?connection=true", token=token)
    assert reply.code == 200 and json.loads(reply.body)["id"] == odd, reply.body
    # The owner's key is the sibling's id, so it reaches the sibling; the odd one by id.
    owner = server.client("alice-token")
    assert (await owner.get(sibling)).id == sibling
    assert (await owner.get(odd)).name == sibling
    listed = await server.fetch("GET", api, token="alice-token")
    assert listed.code == 200 and odd in listed.body.decode()
    for key in (sibling, odd):
        await owner.destroy(key)


async def test_a_kernel_token_reaches_only_the_endpoints_it_created(server: Server) -> None:
    """A child session named like the owner's endpoint gets no hold on that endpoint."""
    kernel, tokens = _kernel_side(server)
    a = await _create(server, "alice-token")
    token = tokens.mint(a)
    endpoints = "bai/api/v1/endpoints"
    idle = {"scaling": {"min_replicas": 1, "max_replicas": 1}}
    replica = {"startup_command": "sleep 600", "service_ports": ["model:http:8000"]}
    request = {"name": "owners-model", "replica": replica, **idle}
    made = await server.fetch("POST", endpoints, request, token="alice-token")
    assert made.code == 201, made.body
    child = await _create(kernel, token, name="owners-model")
    child_token = tokens.mint(child)
    for who in (token, child_token):
        for method, body in (("GET", None), ("PATCH", {"health_path": "/x"}), ("DELETE", None)):
            reply = await kernel.fetch(method, f"{endpoints}/owners-model", body, token=who)
            assert reply.code == 403, (method, reply.body)
            assert "only the endpoints it created" in _error(reply)
    reply = await server.fetch("GET", f"{endpoints}/owners-model", token="alice-token")
    assert reply.code == 200 and json.loads(reply.body)["spec"]["health_path"] == "/"
    # It lists the owner's, and manages the endpoints it created itself.
    listed = await kernel.fetch("GET", endpoints, token=token)
    assert listed.code == 200 and "owners-model" in listed.body.decode()
    mine = {**request, "name": "kernels-model"}
    assert (await kernel.fetch("POST", endpoints, mine, token=token)).code == 201
    assert (await kernel.fetch("GET", f"{endpoints}/kernels-model", token=token)).code == 200
    reply = await kernel.fetch("GET", f"{endpoints}/kernels-model", token=child_token)
    assert reply.code == 403
    assert (await kernel.fetch("DELETE", f"{endpoints}/kernels-model", token=token)).code == 200
    assert (
        await server.fetch("DELETE", f"{endpoints}/owners-model", token="alice-token")
    ).code == 200
    for key in (child, a):
        await server.client("alice-token").destroy(key)
