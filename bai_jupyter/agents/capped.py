"""Output of any size read within a byte cap: the last bytes kept, the rest counted.

A kernel can write more than a shared manager can hold (an ``exec`` printing
gigabytes, a log that never stops). Every reader of a kernel's output (exec,
logs, the log kept at teardown) feeds its chunks here as they arrive, so memory
stays within ``limit`` plus one chunk whatever the kernel wrote. The *tail* is
kept: the end of an output is where a failing command says why.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

__all__ = [
    "DROPPED_MARK",
    "EXEC_OUTPUT_LIMIT",
    "LOG_BYTES_LIMIT",
    "MAX_LOG_TAIL",
    "OutputTail",
    "last_lines",
]

#: Bytes of an ``exec``'s output (stdout and stderr together) kept by default: the last.
EXEC_OUTPUT_LIMIT = 1 << 20
#: Bytes of a kernel's log read by default (the last; see ``BaiSessionManager.log_limit``).
LOG_BYTES_LIMIT = 1 << 20
#: The most lines a request for a log's tail may ask for.
MAX_LOG_TAIL = 1_000_000
#: The first line of a log whose earlier output was left out for its size.
DROPPED_MARK = "[… earlier output dropped …]\n"


class OutputTail:
    """The last ``limit`` bytes of a stream fed in chunks, and how many came before them."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"limit must be 0 or more, got {limit}")
        self.limit = limit
        #: Bytes seen and not kept (the head of the output).
        self.dropped = 0
        self._chunks: deque[bytes] = deque()
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        """Keep ``chunk``; drop whole chunks from the front while the rest still fills
        ``limit`` (so each byte is copied once, not once per chunk)."""
        if not chunk:
            return
        self._chunks.append(bytes(chunk))
        self._size += len(chunk)
        while self._chunks and self._size - len(self._chunks[0]) >= self.limit:
            first = self._chunks.popleft()
            self._size -= len(first)
            self.dropped += len(first)

    def feed_all(self, chunks: Iterable[bytes]) -> OutputTail:
        for chunk in chunks:
            self.feed(chunk)
        return self

    def value(self) -> bytes:
        """The kept bytes, exactly the last ``limit`` when more came."""
        data = b"".join(self._chunks)
        extra = max(len(data) - self.limit, 0)
        self.dropped += extra
        self._chunks = deque([data[extra:]]) if data else deque()
        self._size = len(data) - extra
        return data[extra:]

    def text(self) -> str:
        """The kept bytes as text (a character the cut split becomes U+FFFD)."""
        return self.value().decode(errors="replace")

    def log_text(self) -> str:
        """The kept bytes as text, after :data:`DROPPED_MARK` when the head was dropped."""
        text = self.text()
        return DROPPED_MARK + text if self.dropped else text


def last_lines(text: str, count: int) -> str:
    """``text``'s last ``count`` lines (a log already in hand, e.g. kept in the store)."""
    end = len(text) - 1  # a newline at the very end ends the last line
    for _ in range(count):
        end = text.rfind("\n", 0, end)
        if end < 0:
            return text
    return text[end + 1 :]
