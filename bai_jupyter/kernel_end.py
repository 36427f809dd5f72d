"""How a session's end reads to its Jupyter kernel: an exit code, a reason, a notice.

The kernel provisioner reports a session's end as its kernel's exit; a session someone
ended on purpose (``model.ended_on_purpose``) ends the kernel for good, and the notice
says who ended it and why.
"""

from __future__ import annotations

from .model import Session, Status

__all__ = ["ended_notice", "exit_code", "why_pending"]


def exit_code(session: Session) -> int | None:
    """The 'process' exit code of a session: ``None`` while it is queued, starting or running."""
    if not session.status.is_terminal:
        return None
    if session.status is Status.TERMINATED:
        return session.exit_code or 0
    code = session.status_data.get("exit_code")
    return code if isinstance(code, int) and code != 0 else 1


def why_pending(session: Session) -> str:
    """Why it waited: the session's ``pending_reason`` and how many passes tried it."""
    if not session.pending_reason:
        return "the scheduler has not tried it yet"
    tries = session.scheduler_data.get("retries")
    return session.pending_reason + (f" (after {tries} scheduling tries)" if tries else "")


def ended_notice(session: Session) -> str:
    """``bai session NAME was ended (REASON) by WHO``: a caller of the API (its owner, an
    admin) or, with no caller, bai-jupyter's own rules (idle, lifetime)."""
    who = session.status_data.get("ended_by") or "bai-jupyter"
    name = session.spec.name or session.id
    return (
        f"bai session {name} was ended ({session.status_info or session.status.value}) "
        f"by {who}; its kernel does not restart: start a new one"
    )
