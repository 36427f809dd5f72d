"""Errors a front end shows to a user, each with a stable code and an HTTP status.

The manager raises only these; the REST layer turns them into
``{"error": code, "message": text}`` with ``status`` (plus ``"field"``, the
request field's dotted path, when the error is about one), the magics and the
CLI print the message in one line.
"""

from __future__ import annotations


class BaiError(Exception):
    """Base of user-facing errors."""

    code = "error"
    status = 500

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: The request field the error is about, as a dotted path (``resources.cpu``,
        #: ``mounts[2]``, ``roles[1].image``, ``name``); ``None``: the request as a whole.
        self.field = field or None


class InvalidRequest(BaiError):
    """Malformed or impossible input: fix the request."""

    code = "invalid-request"
    status = 400


class ConfigError(BaiError):
    """The operator's configuration is wrong (a setting of the manager, a resource group,
    the policies): not the request's fault, so not a 400; the message names the setting."""

    code = "configuration"
    status = 500


class Forbidden(BaiError):
    """Not allowed for this user: no or a wrong token, or an admin-only action."""

    code = "forbidden"
    status = 403


class TooLarge(BaiError):
    """The request body is over the server's size limit."""

    code = "too-large"
    status = 413


class NotFound(BaiError):
    """No such session (or not one of yours), template or kernel."""

    code = "not-found"
    status = 404


class Conflict(BaiError):
    """The name is taken or the session is in the wrong state for that."""

    code = "conflict"
    status = 409


class Unavailable(BaiError):
    """Not ready yet (e.g. the session is not RUNNING); retry later."""

    code = "unavailable"
    status = 503


class Timeout(BaiError):
    """Waited longer than allowed."""

    code = "timeout"
    status = 504
