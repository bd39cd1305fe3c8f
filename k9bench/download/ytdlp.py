"""The yt-dlp part of a download: parameters, one fetch, cookies from a browser, its log lines.

yt-dlp is imported only inside the functions that run it. :func:`fetch` runs yt-dlp for one
video in its private work folder and raises :class:`~k9bench.download.failures.VideoFailure`
with a failure class for anything that goes wrong; the orchestration
(:mod:`k9bench.download.one`) decides what to do with the file it leaves.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from k9bench.download.failures import DownloadInputError, VideoFailure, classify_error, clean_message

if TYPE_CHECKING:
    from k9bench.download.settings import DownloadConfig

log = logging.getLogger("k9bench.download")
"""yt-dlp's lines are logged under the download's logger (one place to turn them up or down)."""


class SeenWarnings:
    """Thread-safe set of warning texts already logged in this run."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def first(self, key: str) -> bool:
        """True the first time ``key`` is seen."""
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True


class YdlLogger:
    """Routes yt-dlp's output to our logger (DEBUG), so the terminal stays for the bar and summaries.

    yt-dlp's warnings (formats skipped, a JavaScript runtime missing, a format fallback...) are
    kept in ``sink`` for the video's manifest entry, and each distinct one (the video id masked)
    is logged once per run at WARNING through ``seen``.
    """

    def __init__(self, scene: str, sink: list[str] | None = None, seen: SeenWarnings | None = None):
        self.scene = scene
        self.sink = sink
        self.seen = seen

    def debug(self, msg: str) -> None:
        log.debug("[%s] %s", self.scene, msg)

    def info(self, msg: str) -> None:
        log.debug("[%s] %s", self.scene, msg)

    def warning(self, msg: str) -> None:
        text = clean_message(msg)
        if self.sink is not None and text not in self.sink and len(self.sink) < 20:
            self.sink.append(text)
        if self.seen is not None and self.seen.first(text.replace(self.scene, "<id>")):
            log.warning("[%s] yt-dlp warning: %s (further videos with this warning: see their manifest entries)", self.scene, text)
        else:
            log.debug("[%s] yt-dlp warning: %s", self.scene, msg)

    def error(self, msg: str) -> None:
        log.debug("[%s] yt-dlp error: %s", self.scene, msg)


def _backoff(n: int) -> float:
    return float(min(30, 2**n))


def format_sort(max_height: int) -> list[str]:
    """yt-dlp format sort: largest height <= ``max_height`` (else the smallest above), h264, mp4/m4a."""
    return [f"res:{max_height}", "vcodec:h264", "ext:mp4:m4a"]


def ydl_params(
    scene: str,
    work: Path,
    cache_dir: Path,
    config: DownloadConfig,
    ffmpeg: str,
    cookie_file: Path | None,
    logger: YdlLogger | None = None,
) -> dict:
    """The yt-dlp parameters for one video."""
    params: dict[str, Any] = {
        "format": "bv*+ba/b",
        "format_sort": format_sort(config.max_height),
        "merge_output_format": "mp4/mkv",
        "noplaylist": True,
        "paths": {"home": str(work), "temp": str(work)},
        "outtmpl": {"default": f"{scene}.%(ext)s"},
        "continuedl": True,
        "overwrites": False,
        "nopart": False,
        "updatetime": False,
        "fixup": "never",
        "retries": config.retries,
        "fragment_retries": config.retries,
        "extractor_retries": config.retries,
        "file_access_retries": 3,
        "retry_sleep_functions": {"http": _backoff, "fragment": _backoff, "extractor": _backoff},
        "socket_timeout": config.timeout,
        "ffmpeg_location": ffmpeg,
        "cachedir": str(cache_dir),
        "quiet": True,
        "no_warnings": False,
        "noprogress": True,
        "color": {"stdout": "no_color", "stderr": "no_color"},
        "logger": logger if logger is not None else YdlLogger(scene),
        "writeinfojson": False,
        "writethumbnail": False,
        "writesubtitles": False,
    }
    if config.sleep_interval:
        params["sleep_interval"] = config.sleep_interval
    if cookie_file is not None:
        params["cookiefile"] = str(cookie_file)
    if config.allowed_extractors is not None:
        params["allowed_extractors"] = list(config.allowed_extractors)
    if config.ydl_overrides:
        params.update(dict(config.ydl_overrides))
    return params


def fetch(
    scene: str,
    url: str,
    work: Path,
    *,
    config: DownloadConfig,
    ffmpeg: str,
    cache_dir: Path,
    cookie_source: Path | None,
    stop: threading.Event,
    seen: SeenWarnings | None = None,
    warnings: list[str] | None = None,
) -> dict:
    """Run yt-dlp for one video into ``work``; its info dict, or :class:`VideoFailure`.

    A private copy of the cookies (``cookie_source``) lives in ``work`` only while yt-dlp
    runs (yt-dlp rewrites the file it is given). Setting ``stop`` aborts the transfer at its
    next progress update. yt-dlp's warnings are appended to ``warnings``.
    """
    import yt_dlp

    cookie_file = None
    if cookie_source is not None:
        cookie_file = work / "cookies.txt"
        shutil.copyfile(cookie_source, cookie_file)
        os.chmod(cookie_file, 0o600)
    params = ydl_params(scene, work, cache_dir, config, ffmpeg, cookie_file, logger=YdlLogger(scene, warnings, seen))

    def stop_hook(_status: dict) -> None:
        if stop.is_set():
            from yt_dlp.utils import DownloadCancelled

            raise DownloadCancelled("the run was interrupted")

    params["progress_hooks"] = [*params.get("progress_hooks", []), stop_hook]
    try:
        with yt_dlp.YoutubeDL(params) as ydl:
            info = ydl.extract_info(url, download=True)
    except Exception as exc:  # yt-dlp wraps everything in DownloadError; classify by the chain
        error_class, status, message = classify_error(exc)
        raise VideoFailure(error_class, message, status) from None
    finally:
        if cookie_file is not None:
            cookie_file.unlink(missing_ok=True)
    if info is None:
        raise VideoFailure("error", "yt-dlp returned no information for this URL")
    if info.get("_type") in ("playlist", "multi_video"):
        raise VideoFailure("error", "the URL resolved to a playlist, not one video")
    return info


def downloaded_file(info: dict | None, work: Path, scene: str) -> Path | None:
    """The media file yt-dlp left in ``work`` for ``scene`` (its report first, else the largest candidate)."""
    for item in (info or {}).get("requested_downloads") or []:
        path = item.get("filepath")
        if path and Path(path).is_file():
            return Path(path)
    candidates = [
        p for p in work.glob(f"{scene}.*")
        if p.is_file() and not p.name.endswith((".part", ".ytdl", ".tmp", ".remux.mp4")) and ".part-" not in p.name
    ]
    return max(candidates, key=lambda p: p.stat().st_size) if candidates else None


def format_info(info: dict | None) -> dict | None:
    """What yt-dlp fetched, for the manifest."""
    if not info:
        return None
    keys = ("format_id", "ext", "width", "height", "vcodec", "acodec", "protocol")
    return {k: info.get(k) for k in keys}


# ---------------------------------------------------------------------------
# Cookies from a browser

_BROWSER_RE = re.compile(
    r"(?P<name>[^+:]+)(?:\s*\+\s*(?P<keyring>[^:]+))?(?:\s*:\s*(?!:)(?P<profile>.+?))?(?:\s*::\s*(?P<container>.+))?"
)


def parse_browser_spec(spec: str) -> tuple[str, str | None, str | None, str | None]:
    """``BROWSER[+KEYRING][:PROFILE][::CONTAINER]`` -> ``(browser, profile, keyring, container)``.

    Raises :class:`DownloadInputError` for an unknown browser or keyring.
    """
    from yt_dlp.cookies import SUPPORTED_BROWSERS, SUPPORTED_KEYRINGS

    match = _BROWSER_RE.fullmatch(spec.strip())
    if match is None:
        raise DownloadInputError(f"--cookies_from_browser {spec!r}: expected BROWSER[+KEYRING][:PROFILE][::CONTAINER]")
    name, keyring, profile, container = match.group("name", "keyring", "profile", "container")
    name = name.strip().lower()
    if name not in SUPPORTED_BROWSERS:
        raise DownloadInputError(
            f"--cookies_from_browser {spec!r}: unknown browser {name!r} (one of {', '.join(sorted(SUPPORTED_BROWSERS))})"
        )
    if keyring is not None:
        keyring = keyring.strip().upper()
        if keyring not in SUPPORTED_KEYRINGS:
            raise DownloadInputError(
                f"--cookies_from_browser {spec!r}: unknown keyring {keyring!r} (one of {', '.join(sorted(SUPPORTED_KEYRINGS))})"
            )
    return name, profile, keyring, container


def load_browser_cookies(spec: str):
    """Read the browser's cookies once (yt-dlp's reader); raise :class:`DownloadInputError` on failure."""
    from yt_dlp import cookies as ytc

    name, profile, keyring, container = parse_browser_spec(spec)
    try:
        return ytc.extract_cookies_from_browser(name, profile, keyring=keyring, container=container)
    except Exception as exc:  # missing profile, locked database, keyring refused...
        raise DownloadInputError(f"--cookies_from_browser {spec!r}: could not read the browser's cookies: {exc}") from None
