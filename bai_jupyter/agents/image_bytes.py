"""How much of an image a ``docker save`` stream has passed, in the image's own measure.

An engine's image size (``docker image inspect``'s ``Size``) is the sum of the sizes
of the files in its layers; the save stream is larger (tar headers and padding, a
tenth more for an image of many small files) and its length is known only at its
end. To give a copy one measure for done and total from its start, the stream is
read as it passes: the outer tar's layer tars (``<id>/layer.tar``, or ``blobs/…``
in an OCI layout) are parsed in turn, and the contents of their regular files are
counted. Nothing is buffered beyond one 512-byte header; a part that is not a tar
(a JSON blob, a compressed layer) simply counts nothing.
"""

from __future__ import annotations

__all__ = ["ImageBytes"]

_BLOCK = 512
#: Tar entry types whose content is a file's content (regular, old regular, contiguous).
_FILES = frozenset({b"0", b"\0", b"7"})


def _checksum_ok(block: bytes) -> bool:
    try:
        want = int(block[148:156].strip(b"\0 ") or b"0", 8)
    except ValueError:
        return False
    return want == sum(block[:148]) + 8 * 32 + sum(block[156:])


def _size(field: bytes) -> int:
    if field[0] & 0x80:  # GNU base-256, for members over 8 GiB
        return int.from_bytes(field[1:], "big")
    return int(field.strip(b"\0 ") or b"0", 8)


class _Tar:
    """One tar stream fed in pieces; ``owner.counted`` grows by its files' content."""

    def __init__(self, owner: ImageBytes, files: bool) -> None:
        self.owner = owner
        self.files = files  # count regular files (a layer) or nest into layer tars (outer)
        self.head = b""
        self.left = 0  # content bytes left in the current member
        self.pad = 0  # padding bytes after it
        self.counting = False
        self.inner: _Tar | None = None
        self.pax: bytes | None = None  # a pax header's content, gathered
        self.next_size: int | None = None  # a pax header's size for the next member
        self.dead = False

    def feed(self, data: memoryview) -> None:
        i, end = 0, len(data)
        while i < end and not self.dead:
            if self.left:
                n = min(self.left, end - i)
                if self.counting:
                    self.owner.counted += n
                if self.inner is not None:
                    self.inner.feed(data[i : i + n])
                if self.pax is not None:
                    self.pax += bytes(data[i : i + n])
                self.left -= n
                i += n
                if not self.left:
                    self._member_end()
            elif self.pad:
                n = min(self.pad, end - i)
                self.pad -= n
                i += n
            else:
                n = min(_BLOCK - len(self.head), end - i)
                self.head += bytes(data[i : i + n])
                i += n
                if len(self.head) == _BLOCK:
                    self._header(self.head)
                    self.head = b""

    def _header(self, block: bytes) -> None:
        if block.count(0) == _BLOCK:
            return  # the end-of-archive marker
        if not _checksum_ok(block):
            self.dead = True  # not a tar (or not one we read): count no more of it
            return
        kind = block[156:157]
        size = _size(block[124:136])
        if self.next_size is not None and kind not in (b"x", b"g"):
            size, self.next_size = self.next_size, None
        name = block[:100].rstrip(b"\0").decode("utf-8", "replace")
        if kind == b"x":
            self.pax = b""
        elif kind in _FILES:
            self.counting = self.files
            if not self.files and (name.endswith("layer.tar") or name.startswith("blobs/")):
                self.inner = _Tar(self.owner, files=True)
        self.left, self.pad = size, -size % _BLOCK
        if not size:
            self._member_end()

    def _member_end(self) -> None:
        if self.pax is not None:
            for record in self.pax.split(b"\n"):
                key, _, value = record.partition(b" ")[2].partition(b"=")
                if key == b"size":
                    self.next_size = int(value)
        self.pax, self.inner, self.counting = None, None, False


class ImageBytes:
    """Feed it a save stream's chunks in order; ``counted`` is the image bytes passed."""

    def __init__(self) -> None:
        self.counted = 0
        self._outer = _Tar(self, files=False)

    def feed(self, chunk: bytes) -> None:
        self._outer.feed(memoryview(chunk))
