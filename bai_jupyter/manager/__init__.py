"""The session manager: one async service, split by job (see :mod:`.manager`)."""

from __future__ import annotations

from .manager import BaiSessionManager
from .scoped import ScopedManager

__all__ = ["BaiSessionManager", "ScopedManager"]
