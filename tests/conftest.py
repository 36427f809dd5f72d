"""Shared fixtures: the real Docker engine and the kernel image.

Outside CI a test that needs Docker skips when no engine answers; with
``CI=true`` it fails instead, so CI can never pass by skipping them.
"""

from __future__ import annotations

import asyncio
import functools
import os
from typing import Any, NoReturn

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@functools.cache
def docker_client() -> Any:
    """A client of the local engine (raises when none answers)."""
    from docker.client import DockerClient

    factory: Any = DockerClient.from_env
    return factory(timeout=30)


def skip_or_fail(message: str) -> NoReturn:
    """Skip a test whose tool is missing; fail instead under CI, which must run them all."""
    if IN_CI:
        pytest.fail(f"{message} (CI=true: these tests must run)")
    pytest.skip(message)


def _need(what: str, error: Exception | None) -> None:
    skip_or_fail(f"{what}: {error}" if error else what)


@pytest.fixture(scope="session")
def docker_engine() -> Any:
    """The local Docker engine; skip (fail under CI) when it does not answer."""
    from bai_jupyter.agents.docker import DockerAgent

    # Probe first: a client made while no engine answers leaks a socket (a warning).
    if not asyncio.run(DockerAgent.engine_answers(None)):
        _need("no Docker engine answers", None)
    return docker_client()


@pytest.fixture(scope="session")
def kernel_image(docker_engine: Any) -> str:
    """The default kernel image, built by ./scripts/test (bai-jupyter image ensure)."""
    from bai_jupyter.image import DEFAULT_TAG, image_status

    status = image_status(DEFAULT_TAG)
    if not status.present:
        _need(f"kernel image {DEFAULT_TAG} missing: run `bai-jupyter image build`", None)
    return DEFAULT_TAG
