"""Credentials out of the log lines we write: a URI's ``?token=`` (and other secrets') values.

A browser that follows a link with ``?token=`` puts the token in the request's
URI, and tornado's own lines (a request's summary in an error, the access log
of an app without Jupyter's log function: the manager service and its
kernel-access listener) write the URI as it came. Jupyter's own access log
scrubs the same parameters.
"""

from __future__ import annotations

from typing import Any

from tornado.log import access_log, app_log
from tornado.web import HTTPError, RequestHandler

__all__ = ["RedactedLog", "log_request", "redact_uri", "request_summary"]

#: A query parameter whose name contains one of these has its value replaced (Jupyter's
#: rule: the login token, XSRF, OAuth's code and state, API keys).
_SECRET_NAMES = ("token", "auth", "key", "code", "state", "xsrf")
_HIDDEN = "[secret]"


def redact_uri(uri: str) -> str:
    """``uri`` with the values of its secret query parameters replaced."""
    path, sep, query = uri.partition("?")
    if not sep:
        return uri
    query, hash_, fragment = query.partition("#")
    parts = []
    for part in query.split("&"):
        name, eq, _ = part.partition("=")
        secret = eq and any(word in name.lower() for word in _SECRET_NAMES)
        parts.append(f"{name}={_HIDDEN}" if secret else part)
    return f"{path}?{'&'.join(parts)}{hash_}{fragment}"


def request_summary(handler: RequestHandler) -> str:
    """What tornado writes of a request in its log lines, the URI redacted."""
    request = handler.request
    return f"{request.method} {redact_uri(request.uri or '')} ({request.remote_ip})"


def log_request(handler: RequestHandler) -> None:
    """The access log (tornado's levels and line) with the URI redacted: the
    ``log_function`` of apps that are not a Jupyter server's."""
    status = handler.get_status()
    log: Any = access_log.info if status < 400 else access_log.warning
    if status >= 500:
        log = access_log.error
    elapsed = 1000.0 * handler.request.request_time()
    log("%d %s %.2fms", status, request_summary(handler), elapsed)


class RedactedLog(RequestHandler):
    """A handler whose error lines name its request with the URI redacted (tornado's own
    write the URI, and the whole request for an uncaught exception, as they came)."""

    def _request_summary(self) -> str:
        return request_summary(self)

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, HTTPError):
            super().log_exception(typ, value, tb)  # a line with the summary above
        else:
            app_log.error("Uncaught exception %s", request_summary(self), exc_info=(typ, value, tb))
