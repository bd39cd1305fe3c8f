"""Why a download did not happen: input errors, and the failure class of one video.

Two kinds of failure, kept apart:

* :class:`DownloadInputError`: bad input or environment (URL, scene id, output folder,
  ffmpeg, cookies). Raised before anything is written; the scripts exit 2 on it (a
  :class:`~k9bench.stage.StageError`).
* :class:`VideoFailure`: one video could not be fetched. It carries a failure class from
  :data:`FAILURE_CLASSES` (recorded in the manifest) and never stops the other videos.

:func:`classify_error` turns any exception from yt-dlp or the network into
``(failure class, HTTP status, message)``, reading the whole exception chain.
"""

from __future__ import annotations

import re
from typing import Any

from k9bench.stage import EXIT_USAGE, StageError

FAILURE_CLASSES = {
    "unavailable": "the video is unavailable, private, removed, members-only or geo-restricted",
    "sign_in_required": "YouTube asked to sign in (bot check or age gate): pass --cookies or --cookies_from_browser",
    "http_error": "an HTTP error status (see http_status)",
    "network": "connection refused/reset, DNS failure, or the transfer ended early",
    "timeout": "no data arrived within --timeout seconds",
    "invalid_file": "the downloaded file is not a usable video, or the result failed verification",
    "ffmpeg_error": "ffmpeg could not remux the downloaded file",
    "error": "anything else (see message)",
}
"""Failure class -> meaning (documented in the README and the manifest)."""

NO_FORMAT_HINT = (
    "yt-dlp found no downloadable format; the video may still exist: update yt-dlp (pip install -U yt-dlp), "
    "install a JavaScript runtime (deno) for YouTube, pass cookies, and see this entry's yt-dlp warnings"
)
"""Added to the message of a failure where yt-dlp found no usable format (class ``error``)."""


class DownloadInputError(StageError, ValueError):
    """Bad input or environment (URL, scene id, output folder, ffmpeg, cookies): nothing was written.
    A :class:`~k9bench.stage.StageError`: the stage says it in one line and exits 2."""

    exit_code = EXIT_USAGE


class VideoFailure(Exception):
    """A classified failure inside one video's pipeline (becomes that video's manifest entry)."""

    def __init__(self, error_class: str, message: str, http_status: int | None = None):
        super().__init__(message)
        self.error_class = error_class
        """One of :data:`FAILURE_CLASSES`."""
        self.message = message
        """What went wrong, one line."""
        self.http_status = http_status
        """For ``http_error``: the status code."""


_UNAVAILABLE_HINTS = (
    "video unavailable", "this video is unavailable", "private video", "this video is private",
    "has been removed", "no longer available", "account associated with this video has been terminated",
    "members-only", "join this channel", "not available in your country", "geo restrict", "copyright claim",
    "this video has been removed", "age-restricted", "confirm your age", "premieres in", "is not available",
)
_BOT_HINTS = ("not a bot", "sign in to confirm you", "use --cookies", "--cookies-from-browser")
_NO_FORMAT_HINTS = (
    # yt-dlp could not get a downloadable stream: the video may well exist (an outdated yt-dlp, a
    # missing JavaScript runtime for YouTube's challenges, a blocked client), so never "unavailable".
    "requested format is not available", "no video formats found", "only images are available",
    "not available on this app",
)
_TIMEOUT_HINTS = ("timed out", "timeout")
_NETWORK_HINTS = (
    "connection refused", "connection reset", "connection aborted", "remote end closed", "name or service not known",
    "temporary failure in name resolution", "nodename nor servname", "network is unreachable", "no route to host",
    "failed to resolve", "getaddrinfo failed", "did not get any data", "incomplete read", "bytes, expected",
    "content too short", "more expected", "broken pipe", "ssl", "unable to connect", "eof occurred",
)
_NETWORK_TYPES = ("TransportError", "IncompleteRead", "ContentTooShortError", "ProxyError")
_HTTP_RE = re.compile(r"HTTP Error (\d{3})")


def exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception behind it (causes, contexts, yt-dlp's ``exc_info``), once each."""
    seen: list[BaseException] = []
    todo: list[Any] = [exc]
    while todo:
        e = todo.pop(0)
        if not isinstance(e, BaseException) or any(e is s for s in seen):
            continue
        seen.append(e)
        exc_info = getattr(e, "exc_info", None)
        if isinstance(exc_info, tuple) and len(exc_info) > 1:
            todo.append(exc_info[1])
        todo.extend([getattr(e, "cause", None), getattr(e, "source_error", None), e.__cause__, e.__context__])
    return seen


def clean_message(text: str) -> str:
    """The first meaningful line of a yt-dlp/ffmpeg message, without ``ERROR:`` prefixes or colours."""
    text = text.strip()
    text = re.sub(r"^(ERROR:\s*)+", "", text)
    text = re.sub(r"^\[download\]\s*(Got error:\s*)?", "", text)
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return (lines[0] if lines else text)[:500]


def _http_status(chain: list[BaseException]) -> int | None:
    for e in chain:
        if type(e).__name__ != "HTTPError":
            continue
        for attr in ("status", "code"):
            value = getattr(e, attr, None)
            if isinstance(value, int):
                return value
    match = _HTTP_RE.search(" | ".join(str(e) for e in chain))
    return int(match.group(1)) if match else None


def classify_error(exc: BaseException) -> tuple[str, int | None, str]:
    """``(failure class, http status or None, message)`` for an exception from yt-dlp or the network."""
    chain = exception_chain(exc)
    message = clean_message(str(exc)) or type(exc).__name__
    text = " | ".join(f"{type(e).__name__}: {e}" for e in chain).lower()
    if any(h in text for h in _BOT_HINTS):
        return "sign_in_required", None, message
    if any(h in text for h in _NO_FORMAT_HINTS):
        return "error", None, f"{message} ({NO_FORMAT_HINT})"
    if any(h in text for h in _UNAVAILABLE_HINTS):
        return "unavailable", None, message
    status = _http_status(chain)
    if status is not None:
        return "http_error", status, message
    if any(isinstance(e, TimeoutError) for e in chain) or any(h in text for h in _TIMEOUT_HINTS):
        return "timeout", None, message
    if any(isinstance(e, ConnectionError) for e in chain) or any(h in text for h in _NETWORK_HINTS):
        return "network", None, message
    if any(type(e).__name__ in _NETWORK_TYPES for e in chain):
        return "network", None, message
    return "error", None, message
