"""An image streamed from one engine into another (``agents.multinode.copy_image``): the
progress it reports, in the image's own measure, and the load after the last byte.

The copy runs between two real engines of ``swarm_engines`` (``harness.engines``); the
counting of a save stream is also checked on tars made here, cut at awkward places.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import uuid
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from harness.engines import TEST_REPO, Engines, Node, commit_payload

from bai_jupyter.agents.docker import DockerAgent
from bai_jupyter.agents.image_bytes import ImageBytes
from bai_jupyter.agents.multinode import copy_image


def _tar(members: dict[str, bytes], fmt: int = tarfile.USTAR_FORMAT) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("a-link")
        link.type, link.linkname = tarfile.SYMTYPE, "somewhere/far/away"
        tar.addfile(link)
    return out.getvalue()


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_a_save_stream_counts_the_files_of_its_layers_and_nothing_else(fmt: int) -> None:
    """Files inside the layer tars count; the layer tars' own headers, the config, the
    manifest and a blob that is no tar do not, however the stream is cut."""
    layers = [
        {"usr/bin/x": b"x" * 1000, f"{'deep/' * 30}name": b"y" * 513},
        {"etc/empty": b"", "opt/big": bytes(70_000)},
    ]
    outer = {
        "0a/layer.tar": _tar(layers[0], fmt),
        "0a/json": b"{}" * 300,
        "blobs/sha256/1b": _tar(layers[1], fmt),
        "blobs/sha256/2c": b'{"not": "a tar"}' * 100,
        "manifest.json": b"[]" * 400,
    }
    stream = _tar(outer, fmt)
    want = 1000 + 513 + 70_000
    for cut in (1, 7, 512, 4099, len(stream)):
        counter = ImageBytes()
        for start in range(0, len(stream), cut):
            counter.feed(stream[start : start + cut])
        assert counter.counted == want, cut


def _fresh_image(node: Node, base: str) -> str:
    """An image only ``node`` has: ``base`` plus a layer of 96 MiB nothing else holds, so
    the target engine has real work to do after the last byte arrives."""
    image = f"{TEST_REPO}:{uuid.uuid4().hex[:8]}"
    client = node.client(timeout=300)
    try:
        commit_payload(client, base, 96, image)
    finally:
        client.close()
    return image


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_copy_counts_to_a_total_fixed_at_its_start_then_reports_loading(
    tmp_path: Path, swarm_engines: Engines, kernel_image: str
) -> None:
    first, second = swarm_engines.nodes[:2]
    image = _fresh_image(first, kernel_image)
    source = DockerAgent(first.name, endpoint=first.endpoint)
    target = DockerAgent(second.name, endpoint=second.endpoint)
    seen: list[Any] = []  # ("progress", done, total) and ("loading",), in order
    try:
        info = await source.image_info(image)
        assert info is not None and await target.image_info(image) is None
        await copy_image(
            source,
            target,
            image,
            lambda done, total: seen.append(("progress", done, total)),
            lambda: seen.append(("loading",)),
        )
        assert await target.image_info(image) is not None
        assert seen.count(("loading",)) == 1 and seen[-1] == ("loading",)  # after every byte
        progress = [(done, total) for _, done, total in seen[:-1]]
        assert progress[0] == (0, info.size)  # the total is known before the first chunk
        assert {total for _, total in progress} == {info.size}  # and never changes
        done = [d for d, _ in progress]
        assert done == sorted(done) and done[-1] < info.size  # below 1 until loading
        assert done[-1] > 0.99 * info.size, (done[-1], info.size)  # the whole image passed
    finally:
        await source.close()
        await target.close()
        for node in (first, second):
            client = node.client()
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_image(image, force=True)
            client.close()
