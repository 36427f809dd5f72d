"""Plain-text tables, as the command line and ``%bai`` print them."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["format_table"]


def format_table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(wd) for c, wd in zip(cells, widths)).rstrip()

    return "\n".join(line(r) for r in [headers, *rows])
