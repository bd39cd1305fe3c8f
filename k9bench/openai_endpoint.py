"""An OpenAI-compatible endpoint before any chat call: its base URL checked, whether anything
answers, and the small JSON GETs (``/v1/models``, ``/version``) the backend and the judge make.

:func:`check_base_url` refuses a URL without ``http(s)://`` and a host at once (:class:`BadBaseUrl`,
a :class:`~k9bench.stage.StageError`: one line, exit 2), instead of minutes of retried connections;
:func:`probe_endpoint` tells within about its timeout whether anything answers
(:class:`EndpointUnreachable` when nothing does). :func:`scrub` masks the key in any text we keep.
Everything is re-exported by :mod:`k9bench.openai_api`.
"""

from __future__ import annotations

import json
from typing import Any

from k9bench.stage import StageError


PLACEHOLDER_KEY = "not-needed"
"""Sent as the key to a ``--base_url`` server when no key is set (vLLM/SGLang accept any)."""


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced by ``***`` (no-op for short/placeholder secrets)."""
    if not isinstance(text, str) or not text or not secret or secret == PLACEHOLDER_KEY or len(secret) < 6:
        return text
    return text.replace(secret, "***")


def scrub(text: str, secret: str | None = None) -> str:
    """``text`` with ``secret``, URL userinfo, bearer tokens and every registered secret masked
    (:func:`k9bench.redact.redact_text`)."""
    from k9bench.redact import redact_text

    return redact_text(redact(text, secret))


class BadBaseUrl(StageError):
    """A base URL that cannot be an HTTP endpoint (no ``http://``/``https://`` scheme, no host): exit 2, one line."""


class EndpointUnreachable(RuntimeError):
    """Nothing answered at the endpoint within the probe's timeout; the message says where and why."""


def check_base_url(url: str | None, *, flag: str = "--base_url") -> str | None:
    """``url`` without trailing slashes when it is ``http(s)://host[...]``; None stays None (the OpenAI API).

    Raises :class:`BadBaseUrl` (one line naming ``flag``) for anything else, before any request,
    e.g. ``localhost:8000/v1`` (no scheme), which the HTTP client would otherwise retry for minutes.
    The rule is :func:`k9bench.validators.http_url` (the flags' own type)."""
    import argparse

    from k9bench.validators import http_url

    if url is None:
        return None
    try:
        return http_url(url)
    except argparse.ArgumentTypeError as exc:
        raise BadBaseUrl(f"{flag}: {exc}") from None


def _auth_headers(api_key: str | None) -> dict[str, str]:
    if api_key and api_key != PLACEHOLDER_KEY:
        return {"Authorization": f"Bearer {api_key}"}
    return {}


def get_json(url: str, *, api_key: str | None = None, timeout: float = 5.0) -> tuple[int, Any]:
    """``GET url`` -> ``(status, parsed JSON body or None)``; an HTTP error status is returned, not raised.

    Raises :class:`EndpointUnreachable` when nothing answers (refused, timed out, DNS) within ``timeout``."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"Accept": "application/json", **_auth_headers(api_key)})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http(s) checked by the callers
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read() if exc.fp is not None else b""
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EndpointUnreachable(f"nothing answers at {url} within {timeout:g} s ({scrub(str(reason), api_key)})") from None
    try:
        body = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        body = None
    return status, body


def probe_endpoint(base_url: str, api_key: str | None = None, timeout: float = 5.0) -> int:
    """One quick ``GET <base_url>/models``: the HTTP status when anything answers (200, or 401/404 from a
    server that is up); :class:`EndpointUnreachable` within about ``timeout`` seconds when nothing does,
    :class:`BadBaseUrl` for a URL without a scheme. Use it before a long run of retried calls."""
    base = check_base_url(base_url)
    try:
        status, _ = get_json(f"{base}/models", api_key=api_key, timeout=timeout)
    except EndpointUnreachable as exc:
        raise EndpointUnreachable(f"{exc}; is the server up at {base}?") from None
    return status


__all__ = ["PLACEHOLDER_KEY", "BadBaseUrl", "EndpointUnreachable", "check_base_url", "get_json", "probe_endpoint", "redact", "scrub"]
