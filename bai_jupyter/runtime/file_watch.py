"""Waiting for a file to be written without polling: Linux's inotify, through ctypes.

The runtime waits for ipykernel to rewrite its connection file (it does so once
its sockets are bound). A kernel may hold a tiny CPU share (0.05 cpu boots it 20
times slower), and every wake-up of a polling loop would come out of that share;
an inotify descriptor in the supervisor's ``select`` costs nothing until the
write. Where inotify cannot be had (not Linux), :func:`watch_dir` says so and the
caller polls instead.
"""

from __future__ import annotations

import os
import struct

TYPE_CHECKING = False  # spares importing typing at start-up; mypy reads it as True
if TYPE_CHECKING:
    from pathlib import Path

_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_TO = 0x00000080
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name


def watch_dir(folder: Path) -> int | None:
    """A non-blocking inotify descriptor reporting files written or moved into ``folder``;
    ``None`` where there is none to be had."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd = int(libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    mask = _IN_CLOSE_WRITE | _IN_MOVED_TO
    if libc.inotify_add_watch(fd, os.fsencode(str(folder)), mask) < 0:
        os.close(fd)
        return None
    return fd


def written_names(fd: int) -> set[str]:
    """The names of the files written since the last call (nothing blocks)."""
    names: set[str] = set()
    while True:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return names
        at = 0
        while at + _EVENT.size <= len(data):
            length = _EVENT.unpack_from(data, at)[3]
            name = data[at + _EVENT.size : at + _EVENT.size + length].rstrip(b"\0")
            names.add(os.fsdecode(name))
            at += _EVENT.size + length
