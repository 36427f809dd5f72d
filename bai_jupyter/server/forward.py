"""What the proxy passes on, each way: a request without Jupyter's credentials and this hop's
own headers, and a reply without its framing, its redirects and cookies kept under the proxy's
prefix, under our Content-Security-Policy sandbox and sending no Referer.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from http.cookies import CookieError, SimpleCookie
from urllib.parse import quote, unquote_plus, urlsplit

from jupyter_server.utils import url_path_join
from tornado import httputil

__all__ = [
    "jupyter_auth",
    "reply_headers",
    "service_cookie",
    "service_headers",
    "service_target",
    "without_credentials",
]

#: Query parameters that carry Jupyter's credentials.
_JUPYTER_QUERY = {"token", "_xsrf"}
_JUPYTER_AUTH = re.compile(r"^\s*(token|bearer)\s", re.IGNORECASE)
#: Request headers not passed on (names as tornado spells them): Jupyter's XSRF headers,
#: this hop's own (RFC 9110 7.6.1), Expect (answered here) and the length (set again).
_DROPPED = frozenset(
    {
        *("X-Xsrftoken", "X-Xsrf-Token", "X-Csrftoken"),
        *("Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Upgrade"),
        *("Transfer-Encoding", "Proxy-Authorization", "Proxy-Authenticate", "Expect"),
        "Content-Length",
    }
)
#: Reply headers not copied (tornado frames the body itself; a Content-Length is kept: the
#: client then reads a plain body instead of chunks).
_FRAMING = {"Transfer-Encoding", "Connection", "Keep-Alive"}
#: Reply headers that ours replace: a service's own Referrer-Policy could send a token on.
_REPLACED = {"Referrer-Policy"}
#: A page opened through the proxy sends no Referer (its URL may have held a token).
_REFERRER_POLICY = "no-referrer"
#: Names of Jupyter's and JupyterHub's cookies a service may not set (the login cookie is
#: ``username-<host>-<port>`` by default).
_JUPYTER_COOKIE_PREFIXES = ("username-", "jupyterhub-")
_REDIRECTS = (301, 302, 303, 307, 308)
#: What a path keeps unquoted towards the service: RFC 3986's reserved and unreserved.
_PATH_SAFE = ":/?#[]@!$&'()*+,;=-._~"


def service_target(path: str, query: str) -> str:
    """The path (quoted again: tornado unquoted it) and the query without Jupyter's
    credentials (the rest as the caller wrote it)."""
    target = quote(path if path.startswith("/") else "/" + path, safe=_PATH_SAFE)
    kept = without_credentials(query)
    return f"{target}?{kept}" if kept else target


def without_credentials(query: str) -> str:
    """``query`` without Jupyter's credentials (the rest as the caller wrote it)."""
    return "&".join(
        part
        for part in query.split("&")
        if part and unquote_plus(part.split("=", 1)[0]) not in _JUPYTER_QUERY
    )


def jupyter_auth(headers: httputil.HTTPHeaders) -> bool:
    """Whether the request carries Jupyter's token in its ``Authorization`` header."""
    return any(_JUPYTER_AUTH.match(value) for value in headers.get_list("Authorization"))


def service_headers(
    headers: httputil.HTTPHeaders,
    jupyter_cookies: Collection[str],
    context: str,
    body: bytes | None,
    upgrade: str | None,
) -> httputil.HTTPHeaders:
    """The request's headers without Jupyter's token, cookies and XSRF header, with the
    prefix the service is served under (``context``), asking to keep the connection, or
    to upgrade it to ``upgrade``."""
    sent = httputil.HTTPHeaders()
    for name, value in headers.get_all():
        if name in _DROPPED or (name == "Authorization" and _JUPYTER_AUTH.match(value)):
            continue
        if name == "Cookie":
            value = _service_cookies(value, jupyter_cookies)
            if not value:
                continue
        sent.add(name, value)
    for name in ("X-Forwarded-Context", "X-ProxyContextPath", "X-Forwarded-Prefix"):
        sent[name] = context
    if upgrade:
        sent["Connection"] = "Upgrade"
        sent["Upgrade"] = upgrade
    else:
        sent["Connection"] = "keep-alive"
    if body is not None:
        sent["Content-Length"] = str(len(body))
    return sent


def _service_cookies(header: str, jupyter: Collection[str]) -> str:
    try:
        cookies = SimpleCookie(header)
    except CookieError:
        return ""
    return "; ".join(
        f"{name}={morsel.coded_value}"
        for name, morsel in cookies.items()
        if name not in jupyter and not name.startswith("jupyterhub-")
    )


def reply_headers(
    code: int,
    headers: httputil.HTTPHeaders,
    context: str,
    jupyter_cookies: Collection[str],
    csp: str,
) -> Iterator[tuple[str, str]]:
    """The reply's headers as the caller gets them (a 101's all: the connection is the
    two ends' from then on): cookies kept under ``context`` (none named as Jupyter's),
    ``csp`` the last policy (the service's own without a sandbox of theirs), no Referer."""
    if code == 101:
        yield from headers.get_all()
        return
    for name, value in headers.get_all():
        if name in _FRAMING or name in _REPLACED:
            continue
        if name == "Location" and code in _REDIRECTS:
            value = _rewrite_location(value, context)
        elif name == "Set-Cookie":
            cookie = service_cookie(value, context, jupyter_cookies)
            if cookie is None:
                continue
            value = cookie
        elif name == "Content-Security-Policy" and csp:
            value = _without_sandbox(value)
            if not value:
                continue
        yield name, value
    if csp:  # last: a browser takes the sandbox of the last policy that has one
        yield "Content-Security-Policy", csp
    yield "Referrer-Policy", _REFERRER_POLICY


def service_cookie(header: str, context: str, jupyter: Collection[str]) -> str | None:
    """A service's ``Set-Cookie`` with its Path inside ``context`` and no Domain; None
    for a cookie named as one of Jupyter's (or a Hub's): it would shadow that one."""
    first, *attributes = header.split(";")
    name = first.split("=", 1)[0].strip()
    if not name or name in jupyter or name.startswith(_JUPYTER_COOKIE_PREFIXES):
        return None
    path = "/"
    kept = [first.strip()]
    for attribute in attributes:
        key, _, value = attribute.strip().partition("=")
        if key.lower() == "path":
            path = value.strip() or "/"
        elif key.lower() != "domain" and key:
            kept.append(attribute.strip())
    context = context.rstrip("/")
    if path != context and not path.startswith(context + "/"):
        path = url_path_join(context, path).rstrip("/")
    return "; ".join([kept[0], f"Path={path}", *kept[1:]])


def _without_sandbox(policy: str) -> str:
    """A service's policy less its ``sandbox`` directive (ours is the one that applies)."""
    directives = (d.strip() for d in policy.split(";"))
    return "; ".join(d for d in directives if d and d.split()[0].lower() != "sandbox")


def _rewrite_location(location: str, context: str) -> str:
    """A redirect to an absolute path stays under the proxy's prefix."""
    parts = urlsplit(location)
    if parts.scheme or parts.netloc or not location.startswith("/"):
        return location
    return parts._replace(path=url_path_join(context, parts.path)).geturl()
