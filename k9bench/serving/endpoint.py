"""An OpenAI-compatible endpoint before any chat call: its base URL checked, whether anything
answers, and the small JSON GETs (``/v1/models``, ``/version``) the backend and the judge make.

:func:`check_base_url` refuses a URL without ``http(s)://`` and a host at once (:class:`BadBaseUrl`,
a :class:`~k9bench.stage.StageError`: one line, exit 2), instead of minutes of retried connections;
:func:`probe_endpoint` tells within about its timeout whether anything answers
(:class:`EndpointUnreachable` when nothing does). :func:`scrub` masks the key in any text we keep.

Every response is read under :class:`ResponseLimits` (:func:`response_limit_hooks` for the chat client,
:func:`get_json` for the GETs): reading stops at ``max_bytes`` whatever the server claims
(Content-Length or a chunked body with none: :class:`ResponseTooLarge`), and one attempt ends once
``total_s`` have passed (:class:`RequestOverTime`), so a server that trickles bytes cannot hang a run.
Everything is re-exported by :mod:`k9bench.serving.openai_api`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from k9bench.settings import setting
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


@dataclass(frozen=True)
class ResponseLimits:
    """How much of one HTTP response is read, and for how long (the judge and the OpenAI backend)."""

    max_bytes: int = setting(32 * 1024 * 1024, "most bytes read of one response body (a chat reply is a few KiB)", cli=False)
    total_s: float | None = setting(
        None, "seconds one attempt may take in all, body included (None: the client's --timeout per attempt)", cli=False
    )


RESPONSE_LIMITS = ResponseLimits()
"""The limits used when a caller gives none (tests lower them)."""


class ResponseTooLarge(Exception):
    """A response body over :attr:`ResponseLimits.max_bytes`; reading stopped at the cap (not retried)."""


class RequestOverTime(Exception):
    """One attempt that took longer in all than its limit (a server trickling bytes); retried like a timeout."""


def _too_large(url: Any, max_bytes: int, claimed: Any) -> ResponseTooLarge:
    said = f"; it claimed Content-Length {claimed}" if claimed else "; it sent no Content-Length"
    return ResponseTooLarge(f"the response from {url} is over the {max_bytes}-byte cap, reading stopped there{said}")


def _over_time(url: Any, total_s: float) -> RequestOverTime:
    return RequestOverTime(f"the response from {url} took over {total_s:g} s in all (a server trickling bytes?); reading stopped")


def response_limit_hooks(total_s: float, limits: ResponseLimits | None = None) -> dict:
    """``httpx2`` event hooks under which every response stops at ``limits.max_bytes`` (:class:`ResponseTooLarge`)
    and every attempt ends after ``limits.total_s`` (else ``total_s``) seconds in all (:class:`RequestOverTime`).

    Hooks, not a transport, so that the client's own transports (a proxy's from ``HTTPS_PROXY`` too) are capped
    alike. Bodies are asked for uncompressed (``Accept-Encoding: identity``) so the cap bounds what is decoded."""
    import httpx2

    limits = limits or RESPONSE_LIMITS
    deadline_s = limits.total_s if limits.total_s is not None else total_s
    max_bytes = limits.max_bytes

    class _CappedStream(httpx2.SyncByteStream):
        def __init__(self, inner: Any, url: Any, claimed: Any, ends_at: float) -> None:
            self._inner, self._url, self._claimed, self._ends_at = inner, url, claimed, ends_at

        def __iter__(self):
            seen = 0
            for chunk in self._inner:
                seen += len(chunk)
                if seen > max_bytes:
                    raise _too_large(self._url, max_bytes, self._claimed)
                if time.monotonic() > self._ends_at:
                    raise _over_time(self._url, deadline_s)
                yield chunk

        def close(self) -> None:
            self._inner.close()

    def on_request(request: Any) -> None:
        request.headers["Accept-Encoding"] = "identity"
        request.k9bench_ends_at = time.monotonic() + deadline_s

    def on_response(response: Any) -> None:
        request = response.request
        claimed = response.headers.get("content-length")
        if claimed and claimed.isdigit() and int(claimed) > max_bytes:
            raise _too_large(request.url, max_bytes, claimed)
        ends_at = getattr(request, "k9bench_ends_at", time.monotonic() + deadline_s)
        response.stream = _CappedStream(response.stream, request.url, claimed, ends_at)

    return {"request": [on_request], "response": [on_response]}


def read_capped(response: Any, url: str, *, timeout: float, limits: ResponseLimits | None = None) -> bytes:
    """The body of a ``urllib`` response, read under ``limits`` (:class:`ResponseTooLarge`,
    :class:`RequestOverTime` after ``limits.total_s`` or ``timeout`` seconds)."""
    limits = limits or RESPONSE_LIMITS
    deadline_s = limits.total_s if limits.total_s is not None else timeout
    ends_at = time.monotonic() + deadline_s
    claimed = response.headers.get("Content-Length") if getattr(response, "headers", None) is not None else None
    parts: list[bytes] = []
    seen = 0
    while True:
        chunk = response.read1(65536) if hasattr(response, "read1") else response.read(65536)
        if not chunk:
            return b"".join(parts)
        seen += len(chunk)
        if seen > limits.max_bytes:
            raise _too_large(url, limits.max_bytes, claimed)
        if time.monotonic() > ends_at:
            raise _over_time(url, deadline_s)
        parts.append(chunk)


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
            status, raw = response.status, read_capped(response, url, timeout=timeout)
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, read_capped(exc, url, timeout=timeout) if exc.fp is not None else b""
    except (ResponseTooLarge, RequestOverTime) as exc:
        raise EndpointUnreachable(scrub(str(exc), api_key)) from None
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


__all__ = ["PLACEHOLDER_KEY", "RESPONSE_LIMITS", "BadBaseUrl", "EndpointUnreachable", "RequestOverTime", "ResponseLimits",
           "ResponseTooLarge", "read_capped", "response_limit_hooks", "check_base_url", "get_json", "probe_endpoint", "redact", "scrub"]
