"""Fetching K9-Bench videos: each video once, verified, in parallel, every failure explained.

Library entry point (``download_videos.py`` and ``eval_video_llm.py --auto_download``
both call it)::

    from k9bench.download import DownloadConfig, download_videos

    report = download_videos({"dQw4w9WgXcQ": "https://youtu.be/dQw4w9WgXcQ"}, "k9bench_videos",
                             DownloadConfig(workers=4))
    report.counts          # {"ok": 1, "skipped": 0, "failed": 0}
    report.exit_code       # 0 when nothing failed
    report.ok_scenes       # scenes whose {scene}.mp4 is now present and verified

For each ``scene -> url``:

1. ``{scene}.mp4`` already in the folder and verified (:mod:`k9bench.verify`), or
   recorded as verified by the previous manifest with the same size and mtime:
   ``skipped``. A complete file whose only fault is the index at the end is
   remuxed locally; any other file that fails verification is deleted and
   fetched again.
2. Otherwise yt-dlp (Python API, ``noplaylist``) downloads into a private work
   folder ``<output>/.k9bench-download/<scene>.<url hash>/`` preferring the largest
   format at or below 720p (mp4/h264 first); a work folder left by another URL
   for the same scene is wiped, so a ``.part`` is only ever resumed for its own URL.
3. The file is probed, remuxed by ffmpeg (stream copy, ``+faststart``) into a
   temporary ``.mp4``, verified, and atomically renamed to ``{scene}.mp4``.
4. On failure the work folder is removed: nothing invalid stays in the folder.

Each outcome is a :class:`VideoResult` (``ok``/``skipped``/``failed`` with a
failure class from :data:`FAILURE_CLASSES`). The manifest (JSON, written
atomically, refreshed during the run) lists them all with summary counts.

Bad input (a URL that is not YouTube, a scene id that is not 11 safe characters,
an output folder that cannot be written, no ffmpeg, an unreadable cookies file)
raises :class:`DownloadInputError` before anything is written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from k9bench.artifacts import now_iso, provenance as make_provenance, write_json_atomic
from k9bench.youtube import InvalidYouTubeURL, is_valid_scene_name, parse_youtube_id

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1
"""Bumped when the manifest layout changes meaning."""

MANIFEST_NAME = "download_manifest.json"
"""Default manifest file name, inside the output folder."""

WORK_DIRNAME = ".k9bench-download"
"""Hidden folder inside the output folder for in-progress downloads and yt-dlp's cache."""

STATUSES = ("ok", "skipped", "failed")
"""``ok``: fetched and verified now; ``skipped``: already present and verified; ``failed``."""

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

MANIFEST_WRITE_INTERVAL_S = 5.0
"""During a run the manifest is refreshed at most this often (and always at the end)."""


class DownloadInputError(ValueError):
    """Bad input or environment (URL, scene id, output folder, ffmpeg, cookies): nothing was written."""


@dataclass(frozen=True)
class DownloadConfig:
    """How to download; every field has a sensible default."""

    workers: int = 4
    """Videos fetched in parallel (threads; each runs its own yt-dlp)."""
    retries: int = 3
    """Retries of a failed request/fragment/extraction inside yt-dlp (with backoff)."""
    timeout: float = 30.0
    """Seconds without data before a connection counts as stalled (yt-dlp ``socket_timeout``)."""
    cookies: str | None = None
    """A Netscape cookies.txt for yt-dlp (a private copy is used; the file is never rewritten)."""
    cookies_from_browser: str | None = None
    """``BROWSER[+KEYRING][:PROFILE][::CONTAINER]`` to read cookies from, as yt-dlp's CLI takes it."""
    sleep_interval: float = 0.0
    """Seconds each worker waits before each download (rate limits)."""
    max_height: int = 720
    """Preferred largest frame height: the largest format at or below it wins, else the smallest above."""
    manifest_path: str | None = None
    """Where to write the manifest (default ``<output_dir>/download_manifest.json``)."""
    write_manifest: bool = True
    """Set False to keep the report in memory only."""
    progress: bool = True
    """Show a tqdm bar over videos (still subject to ``K9BENCH_NO_PROGRESS``)."""
    reverify: bool = False
    """Verify every existing file again, even one an earlier run's manifest recorded as verified and unchanged."""
    ffmpeg_timeout: float = 900.0
    """Seconds allowed for one remux."""
    allowed_extractors: tuple[str, ...] | None = None
    """yt-dlp extractor names allowed (regexes); None = yt-dlp's default set. Tests restrict it to their fake."""
    ydl_overrides: Mapping[str, Any] | None = None
    """Extra yt-dlp parameters merged last (advanced use and tests)."""

    def public_dict(self) -> dict:
        """The settings as recorded in the manifest (cookie paths kept, no cookie content)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "ydl_overrides":
                value = sorted(value) if value else None
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out


@dataclass
class VideoResult:
    """The outcome for one video (one manifest entry)."""

    scene_name: str
    """The 11-character YouTube id."""
    url: str
    """The URL asked for."""
    status: str
    """``ok``, ``skipped`` or ``failed``."""
    file: str | None = None
    """File name inside the output folder when present and verified (``{scene}.mp4``)."""
    error_class: str | None = None
    """For a failure: one of :data:`FAILURE_CLASSES`."""
    http_status: int | None = None
    """For ``http_error``: the status code."""
    message: str | None = None
    """For a failure: what went wrong; otherwise notes (e.g. a replaced invalid file)."""
    seconds: float = 0.0
    """Wall time spent on this video."""
    size_bytes: int | None = None
    """Size of the final file."""
    format: dict | None = None
    """What yt-dlp fetched: format_id, ext, width, height, vcodec, acodec."""
    video: dict | None = None
    """What verification found: codec, width, height, duration, header_frames, packets, has_audio."""
    warnings: list[str] | None = None
    """yt-dlp's warnings for this video (e.g. formats skipped, no JavaScript runtime), None when there were none."""
    replaced_invalid: str | None = None
    """Why a pre-existing ``{scene}.mp4`` was rejected and deleted, if one was."""
    mtime_ns: int | None = None
    """Modification time of the final file (with ``size_bytes``, lets a rerun trust an unchanged verified file)."""
    timestamp: str = ""
    """When this outcome was reached (ISO 8601)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class DownloadReport:
    """Everything a run did: one :class:`VideoResult` per video, counts and the manifest."""

    output_dir: str
    """The video folder (absolute)."""
    results: list[VideoResult] = field(default_factory=list)
    """Per-video outcomes, in input order (only finished ones after an interrupt)."""
    manifest_path: str | None = None
    """Where the manifest was written (None when not written)."""
    started_at: str = ""
    """Run start (ISO 8601)."""
    finished_at: str = ""
    """Run end (ISO 8601)."""
    complete: bool = True
    """False when the run was interrupted before every video was tried."""
    config: dict = field(default_factory=dict)
    """The settings used."""
    provenance: dict = field(default_factory=dict)
    """What produced the run (script, arguments, versions)."""

    @property
    def counts(self) -> dict[str, int]:
        """Videos per status (``ok``, ``skipped``, ``failed``)."""
        out = {s: 0 for s in STATUSES}
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    @property
    def failed_by_class(self) -> dict[str, int]:
        """Failed videos per failure class (only classes that occurred)."""
        out: dict[str, int] = {}
        for r in self.results:
            if r.status == "failed":
                key = r.error_class or "error"
                out[key] = out.get(key, 0) + 1
        return dict(sorted(out.items()))

    @property
    def failed(self) -> list[VideoResult]:
        """The failed entries."""
        return [r for r in self.results if r.status == "failed"]

    @property
    def ok_scenes(self) -> set[str]:
        """Scenes whose ``{scene}.mp4`` is present and verified (ok or skipped)."""
        return {r.scene_name for r in self.results if r.status in ("ok", "skipped")}

    @property
    def by_scene(self) -> dict[str, VideoResult]:
        """Entries by scene name."""
        return {r.scene_name: r for r in self.results}

    @property
    def exit_code(self) -> int:
        """0 when every video is present and verified, else 1."""
        return 0 if self.complete and not self.failed else 1

    def summary(self) -> dict:
        """Counts for the manifest and the log."""
        return {"total": len(self.results), **self.counts, "failed_by_class": self.failed_by_class}

    def summary_line(self) -> str:
        """One human line: totals and failure classes."""
        c = self.counts
        text = f"{len(self.results)} video(s): {c['ok']} downloaded, {c['skipped']} already present, {c['failed']} failed"
        if self.failed_by_class:
            text += " (" + ", ".join(f"{k}: {v}" for k, v in self.failed_by_class.items()) + ")"
        return text

    def manifest(self) -> dict:
        """The manifest JSON object."""
        return {
            "manifest_version": MANIFEST_VERSION,
            "output_dir": self.output_dir,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "complete": self.complete,
            "summary": self.summary(),
            "failure_classes": FAILURE_CLASSES,
            "config": self.config,
            "videos": [r.to_dict() for r in self.results],
            "provenance": self.provenance,
        }


# ---------------------------------------------------------------------------
# Input checks


def check_videos(videos: Mapping[str, str]) -> list[str]:
    """Problems with the ``scene -> url`` mapping (empty when all is well)."""
    problems = []
    for scene, url in videos.items():
        if not is_valid_scene_name(scene):
            problems.append(f"scene id {scene!r}: not 11 characters of [A-Za-z0-9_-]")
            continue
        try:
            vid = parse_youtube_id(url)
        except InvalidYouTubeURL as exc:
            problems.append(f"scene {scene}: {exc}")
            continue
        if vid != scene:
            problems.append(f"scene {scene}: the URL {url!r} is for video {vid!r}")
    return problems


_BROWSER_RE = re.compile(
    r"(?P<name>[^+:]+)(?:\s*\+\s*(?P<keyring>[^:]+))?(?:\s*:\s*(?!:)(?P<profile>.+?))?(?:\s*::\s*(?P<container>.+))?"
)


def parse_browser_spec(spec: str) -> tuple[str, str | None, str | None, str | None]:
    """``BROWSER[+KEYRING][:PROFILE][::CONTAINER]`` -> yt-dlp's ``cookiesfrombrowser`` tuple."""
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


def check_config(config: DownloadConfig) -> list[str]:
    """Problems with the settings (empty when all is well)."""
    problems = []
    if not isinstance(config.workers, int) or config.workers < 1:
        problems.append(f"workers must be at least 1 (got {config.workers!r})")
    if not isinstance(config.retries, int) or config.retries < 0:
        problems.append(f"retries must be 0 or more (got {config.retries!r})")
    if not config.timeout or config.timeout <= 0:
        problems.append(f"timeout must be positive seconds (got {config.timeout!r})")
    if config.sleep_interval is None or config.sleep_interval < 0:
        problems.append(f"sleep_interval must be 0 or more seconds (got {config.sleep_interval!r})")
    if not isinstance(config.max_height, int) or config.max_height < 1:
        problems.append(f"max_height must be a positive integer (got {config.max_height!r})")
    if config.cookies:
        path = Path(os.path.expanduser(config.cookies))
        if not path.is_file():
            problems.append(f"cookies file {config.cookies}: no such file")
        elif not os.access(path, os.R_OK):
            problems.append(f"cookies file {config.cookies}: not readable")
    if config.cookies_from_browser:
        try:
            parse_browser_spec(config.cookies_from_browser)
        except DownloadInputError as exc:
            problems.append(str(exc))
    return problems


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable_target(path: Path, what: str) -> str | None:
    """A problem if ``path`` (a folder, existing or to be created) cannot be written."""
    if path.exists() and not path.is_dir():
        return f"{what} {path}: exists and is not a folder"
    base = _nearest_existing(path)
    if not base.is_dir():
        return f"{what} {path}: {base} is not a folder"
    if not os.access(base, os.W_OK | os.X_OK):
        return f"{what} {path}: {base} is not writable"
    return None


@contextlib.contextmanager
def folder_lock(folder: Path):
    """Hold an exclusive ``flock`` on ``folder`` (the directory itself: nothing is created or deleted).

    A second run into the same folder (another shell, another job's ``--auto_download``) waits
    here, saying so, instead of writing the same partial files; it then skips what the first
    run verified. Where the file system has no ``flock`` (some network file systems), the
    run goes on unlocked (logged at DEBUG).
    """
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError as exc:
        log.debug("cannot open %s for locking (%s); going on without a lock", folder, exc)
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("another download is running into %s; waiting for it to finish "
                        "(the videos it verifies are then skipped here)", folder)
            fcntl.flock(fd, fcntl.LOCK_EX)
            log.info("the other download into %s has finished; going on", folder)
        except OSError as exc:
            log.debug("cannot lock %s (%s); going on without a lock", folder, exc)
        yield
    finally:
        os.close(fd)  # releases the lock


def prepare_output_dir(output_dir: Path) -> None:
    """Create the output folder and prove it writable with a throwaway file."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".k9bench-write-test-", dir=output_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise DownloadInputError(f"output folder {output_dir}: cannot write there ({exc})") from None


# ---------------------------------------------------------------------------
# Failure classification

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
NO_FORMAT_HINT = (
    "yt-dlp found no downloadable format; the video may still exist: update yt-dlp (pip install -U yt-dlp), "
    "install a JavaScript runtime (deno) for YouTube, pass cookies, and see this entry's yt-dlp warnings"
)
"""Added to the message of a failure where yt-dlp found no usable format (class ``error``)."""
_TIMEOUT_HINTS = ("timed out", "timeout")
_NETWORK_HINTS = (
    "connection refused", "connection reset", "connection aborted", "remote end closed", "name or service not known",
    "temporary failure in name resolution", "nodename nor servname", "network is unreachable", "no route to host",
    "failed to resolve", "getaddrinfo failed", "did not get any data", "incomplete read", "bytes, expected",
    "content too short", "more expected", "broken pipe", "ssl", "unable to connect", "eof occurred",
)
_HTTP_RE = re.compile(r"HTTP Error (\d{3})")


def _exception_chain(exc: BaseException) -> list[BaseException]:
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


def _clean_message(text: str) -> str:
    text = text.strip()
    text = re.sub(r"^(ERROR:\s*)+", "", text)
    text = re.sub(r"^\[download\]\s*(Got error:\s*)?", "", text)
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return (lines[0] if lines else text)[:500]


def classify_error(exc: BaseException) -> tuple[str, int | None, str]:
    """``(failure class, http status or None, message)`` for an exception from yt-dlp or the network."""
    chain = _exception_chain(exc)
    message = _clean_message(str(exc)) or type(exc).__name__
    text = " | ".join(f"{type(e).__name__}: {e}" for e in chain).lower()
    if any(h in text for h in _BOT_HINTS):
        return "sign_in_required", None, message
    if any(h in text for h in _NO_FORMAT_HINTS):
        return "error", None, f"{message} ({NO_FORMAT_HINT})"
    if any(h in text for h in _UNAVAILABLE_HINTS):
        return "unavailable", None, message
    status = None
    for e in chain:
        candidate = getattr(e, "status", None)
        if type(e).__name__ == "HTTPError" and isinstance(candidate, int):
            status = candidate
            break
        code = getattr(e, "code", None)
        if type(e).__name__ == "HTTPError" and isinstance(code, int):
            status = code
            break
    if status is None:
        match = _HTTP_RE.search(" | ".join(str(e) for e in chain))
        if match:
            status = int(match.group(1))
    if status is not None:
        return "http_error", status, message
    if any(isinstance(e, TimeoutError) for e in chain) or any(h in text for h in _TIMEOUT_HINTS):
        return "timeout", None, message
    if any(isinstance(e, ConnectionError) for e in chain) or any(h in text for h in _NETWORK_HINTS):
        return "network", None, message
    if any(type(e).__name__ in ("TransportError", "IncompleteRead", "ContentTooShortError", "ProxyError") for e in chain):
        return "network", None, message
    return "error", None, message


class _Failure(Exception):
    """A classified failure inside one video's pipeline."""

    def __init__(self, error_class: str, message: str, http_status: int | None = None):
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.http_status = http_status


# ---------------------------------------------------------------------------
# yt-dlp


class _YdlLogger:
    """Routes yt-dlp's output to our logger (DEBUG), so the terminal stays for the bar and summaries.

    yt-dlp's warnings (formats skipped, a JavaScript runtime missing, a format fallback...) are
    kept in ``sink`` for the video's manifest entry, and each distinct one (the video id masked)
    is logged once per run at WARNING through ``seen``.
    """

    def __init__(self, scene: str, sink: list[str] | None = None, seen: "_SeenWarnings | None" = None):
        self.scene = scene
        self.sink = sink
        self.seen = seen

    def debug(self, msg: str) -> None:
        log.debug("[%s] %s", self.scene, msg)

    def info(self, msg: str) -> None:
        log.debug("[%s] %s", self.scene, msg)

    def warning(self, msg: str) -> None:
        text = _clean_message(msg)
        if self.sink is not None and text not in self.sink and len(self.sink) < 20:
            self.sink.append(text)
        if self.seen is not None and self.seen.first(text.replace(self.scene, "<id>")):
            log.warning("[%s] yt-dlp warning: %s (further videos with this warning: see their manifest entries)", self.scene, text)
        else:
            log.debug("[%s] yt-dlp warning: %s", self.scene, msg)

    def error(self, msg: str) -> None:
        log.debug("[%s] yt-dlp error: %s", self.scene, msg)


class _SeenWarnings:
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
    logger: _YdlLogger | None = None,
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
        "logger": logger if logger is not None else _YdlLogger(scene),
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


def _url_key(url: str) -> str:
    return hashlib.sha256(url.encode("utf-8")).hexdigest()[:10]


# ---------------------------------------------------------------------------
# ffmpeg


def remux_faststart(src: Path, dst: Path, *, ffmpeg_timeout: float) -> None:
    """Stream-copy ``src`` into an mp4 at ``dst`` with the index first; raise :class:`_Failure` on error."""
    from k9bench.ffmpeg import run_ffmpeg

    args = ["-i", str(src), "-map", "0:v:0", "-map", "0:a:0?", "-c", "copy", "-movflags", "+faststart", "-f", "mp4", str(dst)]
    try:
        run_ffmpeg(args, timeout=ffmpeg_timeout)
    except subprocess.CalledProcessError as exc:
        detail = _clean_message(exc.stderr or "") or f"exit status {exc.returncode}"
        raise _Failure("ffmpeg_error", f"ffmpeg remux failed: {detail}") from None
    except subprocess.TimeoutExpired:
        raise _Failure("ffmpeg_error", f"ffmpeg remux took longer than {ffmpeg_timeout:g} s") from None
    except OSError as exc:
        raise _Failure("ffmpeg_error", f"ffmpeg could not run: {exc}") from None


# ---------------------------------------------------------------------------
# One video


@dataclass
class _Context:
    output_dir: Path
    work_root: Path
    cache_dir: Path
    config: DownloadConfig
    ffmpeg: str
    cookie_source: Path | None
    stop: threading.Event = field(default_factory=threading.Event)
    previous: dict = field(default_factory=dict)
    seen_warnings: _SeenWarnings = field(default_factory=_SeenWarnings)


def _verified_earlier(final: Path, entry: dict | None) -> dict | None:
    """The earlier manifest entry when it recorded this very file (same size and mtime) as verified."""
    if not entry or entry.get("status") not in ("ok", "skipped") or entry.get("file") != final.name:
        return None
    try:
        stat = final.stat()
    except OSError:
        return None
    if entry.get("size_bytes") == stat.st_size and entry.get("mtime_ns") == stat.st_mtime_ns:
        return entry
    return None


def load_previous_manifest(path: Path | None) -> dict[str, dict]:
    """Entries of an earlier manifest by scene (empty when absent or unreadable)."""
    if path is None or not path.is_file():
        return {}
    from k9bench.artifacts import ArtifactError, read_json

    try:
        data = read_json(path)
    except ArtifactError as exc:
        log.warning("ignoring the earlier manifest: %s", exc)
        return {}
    if not isinstance(data, dict) or data.get("manifest_version") != MANIFEST_VERSION or not isinstance(data.get("videos"), list):
        return {}
    return {e["scene_name"]: e for e in data["videos"] if isinstance(e, dict) and isinstance(e.get("scene_name"), str)}


def _downloaded_file(info: dict | None, work: Path, scene: str) -> Path | None:
    for item in (info or {}).get("requested_downloads") or []:
        path = item.get("filepath")
        if path and Path(path).is_file():
            return Path(path)
    candidates = [
        p for p in work.glob(f"{scene}.*")
        if p.is_file() and not p.name.endswith((".part", ".ytdl", ".tmp", ".remux.mp4")) and ".part-" not in p.name
    ]
    return max(candidates, key=lambda p: p.stat().st_size) if candidates else None


def _format_info(info: dict | None) -> dict | None:
    if not info:
        return None
    keys = ("format_id", "ext", "width", "height", "vcodec", "acodec", "protocol")
    return {k: info.get(k) for k in keys}


def _fetch(scene: str, url: str, work: Path, ctx: _Context, warnings: list[str] | None = None) -> dict:
    """Run yt-dlp for one video; raise :class:`_Failure` on any classified failure.

    yt-dlp's warnings are appended to ``warnings``.
    """
    import yt_dlp

    cookie_file = None
    if ctx.cookie_source is not None:
        cookie_file = work / "cookies.txt"
        shutil.copyfile(ctx.cookie_source, cookie_file)
        os.chmod(cookie_file, 0o600)
    params = ydl_params(scene, work, ctx.cache_dir, ctx.config, ctx.ffmpeg, cookie_file,
                        logger=_YdlLogger(scene, warnings, ctx.seen_warnings))

    def stop_hook(_status: dict) -> None:
        if ctx.stop.is_set():
            from yt_dlp.utils import DownloadCancelled

            raise DownloadCancelled("the run was interrupted")

    params["progress_hooks"] = [*params.get("progress_hooks", []), stop_hook]
    try:
        with yt_dlp.YoutubeDL(params) as ydl:
            info = ydl.extract_info(url, download=True)
    except Exception as exc:  # yt-dlp wraps everything in DownloadError; classify by the chain
        error_class, status, message = classify_error(exc)
        raise _Failure(error_class, message, status) from None
    finally:
        if cookie_file is not None:
            cookie_file.unlink(missing_ok=True)
    if info is None:
        raise _Failure("error", "yt-dlp returned no information for this URL")
    if info.get("_type") in ("playlist", "multi_video"):
        raise _Failure("error", "the URL resolved to a playlist, not one video")
    return info


def _faststart_existing(final: Path, ctx: _Context):
    """Remux a complete but not-faststart ``final`` in place; the verified result, or None if that failed."""
    from k9bench.verify import verify_video

    work = ctx.work_root / f"{final.stem}.local"
    work.mkdir(parents=True, exist_ok=True)
    tmp = work / f"{final.stem}.remux.mp4"
    try:
        remux_faststart(final, tmp, ffmpeg_timeout=ctx.config.ffmpeg_timeout)
        check = verify_video(tmp)
        if not check.ok:
            log.warning("%s: local remux did not verify (%s)", final, check.reason)
            return None
        os.replace(tmp, final)
        return check
    except _Failure as fail:
        log.warning("%s: local remux failed (%s)", final, fail.message)
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def download_one(scene: str, url: str, ctx: _Context) -> VideoResult:
    """Bring ``{scene}.mp4`` into the output folder (or explain why not); never raises for a video problem.

    Whatever goes wrong with one video (an OS error on its files included) is that video's
    failure: the other videos of the run go on.
    """
    started = time.monotonic()
    try:
        return _download_one(scene, url, ctx)
    except Exception as exc:
        log.debug("%s: unexpected failure", scene, exc_info=True)
        return VideoResult(scene_name=scene, url=url, status="failed", error_class="error",
                           message=f"{type(exc).__name__}: {exc}"[:500], seconds=round(time.monotonic() - started, 3),
                           timestamp=now_iso())


def _download_one(scene: str, url: str, ctx: _Context) -> VideoResult:
    from k9bench.verify import probe_media, verify_video

    started = time.monotonic()
    final = ctx.output_dir / f"{scene}.mp4"
    result = VideoResult(scene_name=scene, url=url, status="failed")

    def finish(status: str, **kw: Any) -> VideoResult:
        result.status = status
        for key, value in kw.items():
            setattr(result, key, value)
        result.warnings = list(result.warnings) if result.warnings else None
        result.seconds = round(time.monotonic() - started, 3)
        result.timestamp = now_iso()
        return result

    if ctx.stop.is_set():
        return finish("failed", error_class="error", message="not tried: the run was interrupted")
    if final.exists() and not final.is_file():
        return finish("failed", error_class="error",
                      message=f"{final} exists but is not a regular file (a folder?): move it away and rerun")
    if final.exists():
        earlier = _verified_earlier(final, ctx.previous.get(scene))
        if earlier is not None:
            return finish("skipped", file=final.name, size_bytes=earlier.get("size_bytes"), video=earlier.get("video"),
                          mtime_ns=final.stat().st_mtime_ns, message="verified by an earlier run; unchanged since")
        check = verify_video(final)
        if check.ok:
            return finish("skipped", file=final.name, size_bytes=check.size, video=check.to_dict(), mtime_ns=final.stat().st_mtime_ns)
        if check.only_not_faststart:
            fixed = _faststart_existing(final, ctx)
            if fixed is not None:
                return finish("ok", file=final.name, size_bytes=fixed.size, video=fixed.to_dict(), mtime_ns=final.stat().st_mtime_ns,
                              message="the existing file had its index at the end: remuxed to faststart locally, no download")
        log.warning("%s: the existing file fails verification (%s); deleting it and downloading again", final, check.reason)
        result.replaced_invalid = check.reason
        final.unlink(missing_ok=True)

    key = _url_key(url)
    work = ctx.work_root / f"{scene}.{key}"
    for stale in ctx.work_root.glob(f"{scene}.*"):
        if stale != work and stale.is_dir():
            log.info("%s: discarding a partial download left for another URL (%s)", scene, stale.name)
            shutil.rmtree(stale, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    try:
        warnings: list[str] = []
        result.warnings = warnings
        info = _fetch(scene, url, work, ctx, warnings)
        result.format = _format_info(info)
        height = (result.format or {}).get("height")
        if isinstance(height, int) and height > ctx.config.max_height:
            log.warning("%s: no format at or below %dp; took %dp", scene, ctx.config.max_height, height)
        src = _downloaded_file(info, work, scene)
        if src is None:
            raise _Failure("error", "yt-dlp reported success but no file was written")
        ok, reason = probe_media(src)
        if not ok:
            raise _Failure("invalid_file", f"the downloaded file is not a usable video: {reason}")
        tmp = work / f"{scene}.remux.mp4"
        remux_faststart(src, tmp, ffmpeg_timeout=ctx.config.ffmpeg_timeout)
        check = verify_video(tmp)
        if not check.ok:
            raise _Failure("invalid_file", f"the remuxed file fails verification: {check.reason}")
        os.replace(tmp, final)
        shutil.rmtree(work, ignore_errors=True)
        note = f"replaced an invalid existing file ({result.replaced_invalid})" if result.replaced_invalid else None
        return finish("ok", file=final.name, size_bytes=check.size, video=check.to_dict(), message=note,
                      mtime_ns=final.stat().st_mtime_ns)
    except _Failure as fail:
        shutil.rmtree(work, ignore_errors=True)
        return finish("failed", error_class=fail.error_class, http_status=fail.http_status, message=fail.message)
    except Exception as exc:  # an unexpected bug or OS error: recorded, never fatal for the other videos
        log.debug("%s: unexpected failure", scene, exc_info=True)
        shutil.rmtree(work, ignore_errors=True)
        return finish("failed", error_class="error", message=f"{type(exc).__name__}: {exc}"[:500])


# ---------------------------------------------------------------------------
# The run


def _check_inputs(videos: dict, output_dir: Path, config: DownloadConfig) -> tuple[Path | None, str]:
    """Every input problem at once, as one :class:`DownloadInputError`; else ``(manifest path, ffmpeg)``."""
    from k9bench.ffmpeg import FFmpegNotFound, find_ffmpeg

    problems = check_videos(videos) + check_config(config)
    problem = check_writable_target(output_dir, "output folder")
    if problem:
        problems.append(problem)
    manifest_path = None
    if config.write_manifest:
        manifest_path = Path(os.path.expanduser(config.manifest_path)).absolute() if config.manifest_path else output_dir / MANIFEST_NAME
        if manifest_path.is_dir():
            problems.append(f"manifest {manifest_path}: is a folder")
        else:
            problem = check_writable_target(manifest_path.parent, "manifest folder")
            if problem:
                problems.append(problem)
    try:
        ffmpeg = find_ffmpeg()
    except FFmpegNotFound as exc:
        problems.append(str(exc))
        ffmpeg = ""
    if problems:
        raise DownloadInputError("cannot start the download:\n" + "\n".join(f"  - {p}" for p in problems))
    return manifest_path, ffmpeg


def load_browser_cookies(spec: str):
    """Read the browser's cookies once (yt-dlp's reader); raise :class:`DownloadInputError` on failure."""
    from yt_dlp import cookies as ytc

    name, profile, keyring, container = parse_browser_spec(spec)
    try:
        return ytc.extract_cookies_from_browser(name, profile, keyring=keyring, container=container)
    except Exception as exc:  # missing profile, locked database, keyring refused...
        raise DownloadInputError(f"--cookies_from_browser {spec!r}: could not read the browser's cookies: {exc}") from None


def download_videos(
    videos: Mapping[str, str],
    output_dir: str | os.PathLike,
    config: DownloadConfig | None = None,
    *,
    provenance: dict | None = None,
    on_result: Callable[[VideoResult], None] | None = None,
) -> DownloadReport:
    """Fetch every ``scene -> url`` video into ``output_dir`` as verified ``{scene}.mp4`` files.

    Each video is tried exactly once per run (yt-dlp retries requests inside
    that try); all videos are tried even when some fail. Returns the report;
    writes the manifest unless ``config.write_manifest`` is False. Raises
    :class:`DownloadInputError` for bad input before writing anything, and
    ``KeyboardInterrupt`` after writing a manifest of the finished videos.
    ``on_result`` is called (from the calling thread) after each video.
    """
    config = config or DownloadConfig()
    videos = dict(videos)
    output_dir = Path(os.path.expanduser(str(output_dir))).absolute()
    manifest_path, ffmpeg = _check_inputs(videos, output_dir, config)
    browser_jar = None
    if config.cookies and config.cookies_from_browser:
        log.warning("both cookies options given: using the cookies file %s", config.cookies)
    elif config.cookies_from_browser:
        browser_jar = load_browser_cookies(config.cookies_from_browser)

    prepare_output_dir(output_dir)
    # One run at a time per folder: two runs fetching the same video would write the same .part.
    with folder_lock(output_dir):
        report = DownloadReport(
            output_dir=str(output_dir),
            manifest_path=str(manifest_path) if manifest_path else None,
            started_at=now_iso(),
            config=config.public_dict(),
            provenance=provenance if provenance is not None else make_provenance("k9bench.download", [], None),
        )
        work_root = output_dir / WORK_DIRNAME
        work_root.mkdir(exist_ok=True)
        _purge_cookie_copies(work_root)
        cookie_source = Path(os.path.expanduser(config.cookies)).absolute() if config.cookies else None
        if browser_jar is not None:
            # One private Netscape copy for every worker (each gets its own copy of it per video).
            cookie_source = work_root / "browser-cookies.txt"
            os.close(os.open(cookie_source, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
            browser_jar.save(str(cookie_source))
        ctx = _Context(
            output_dir=output_dir,
            work_root=work_root,
            cache_dir=work_root / "yt-dlp-cache",
            config=config,
            ffmpeg=ffmpeg,
            cookie_source=cookie_source,
            previous={} if config.reverify else load_previous_manifest(manifest_path),
        )
        log.info("%d video(s) into %s with %d worker(s)", len(videos), output_dir, config.workers)
        try:
            _run_pool(videos, ctx, report, manifest_path, on_result)
        finally:
            _purge_cookie_copies(work_root)
        _cleanup_work_root(work_root)
        return report


def _run_pool(
    videos: dict,
    ctx: _Context,
    report: DownloadReport,
    manifest_path: Path | None,
    on_result: Callable[[VideoResult], None] | None,
) -> None:
    """Run every video through :func:`download_one` on a thread pool; keep the manifest current."""
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    from k9bench.progress import progress_enabled

    done: dict[str, VideoResult] = {}
    last_write = time.monotonic()

    def write_manifest(complete: bool) -> None:
        nonlocal last_write
        report.results = [done[s] for s in videos if s in done]
        report.finished_at = now_iso()
        report.complete = complete
        if manifest_path is not None:
            write_json_atomic(manifest_path, report.manifest())
        last_write = time.monotonic()

    disable = True if not ctx.config.progress else progress_enabled()
    bar = tqdm(total=len(videos), unit="video", desc="videos", disable=disable, dynamic_ncols=True)
    pool = ThreadPoolExecutor(max_workers=ctx.config.workers, thread_name_prefix="k9dl")
    futures: list[Future] = []
    # Log lines go through tqdm while the bar is shown, so they do not tear it.
    redirect = contextlib.nullcontext() if bar.disable else logging_redirect_tqdm()
    try:
        with redirect:
            futures = [pool.submit(download_one, scene, url, ctx) for scene, url in videos.items()]
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                for fut in finished:
                    res = fut.result()
                    done[res.scene_name] = res
                    _log_result(res)
                    counts = _count(done.values())
                    bar.set_postfix(ok=counts["ok"], skipped=counts["skipped"], failed=counts["failed"], refresh=False)
                    bar.update(1)
                    if on_result is not None:
                        on_result(res)
                if finished and pending and time.monotonic() - last_write >= MANIFEST_WRITE_INTERVAL_S:
                    write_manifest(False)
    except BaseException:
        ctx.stop.set()  # in-flight yt-dlp downloads abort at their next progress update
        for fut in futures:
            fut.cancel()
        pool.shutdown(wait=False, cancel_futures=True)
        bar.close()
        try:
            write_manifest(False)
        except Exception:  # keep the original exception
            log.exception("could not write the manifest while stopping")
        raise
    pool.shutdown(wait=True)
    bar.close()
    write_manifest(True)


def _count(results: Any) -> dict[str, int]:
    out = {s: 0 for s in STATUSES}
    for r in results:
        out[r.status] += 1
    return out


def _log_result(res: VideoResult) -> None:
    if res.status == "failed":
        extra = f" HTTP {res.http_status}" if res.http_status else ""
        log.warning("%s: FAILED [%s%s] %s", res.scene_name, res.error_class, extra, res.message)
    elif res.status == "ok":
        fmt = res.format or {}
        log.info("%s: downloaded (%s, %sp, %.1f s)", res.scene_name, fmt.get("format_id"), fmt.get("height") or "?", res.seconds)
    else:
        log.debug("%s: already present and verified", res.scene_name)


def _purge_cookie_copies(work_root: Path) -> None:
    """Delete private cookie copies (a killed run may have left some)."""
    for path in [work_root / "browser-cookies.txt", *work_root.glob("*/cookies.txt")]:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("could not delete the cookie copy %s: %s", path, exc)


def _cleanup_work_root(work_root: Path) -> None:
    """Remove leftover per-video work folders' parent if nothing but the cache remains empty."""
    try:
        entries = [p for p in work_root.iterdir() if p.name != "yt-dlp-cache"]
        cache = work_root / "yt-dlp-cache"
        if not entries and (not cache.exists() or not any(cache.iterdir())):
            shutil.rmtree(work_root, ignore_errors=True)
    except OSError:
        pass


__all__ = [
    "DownloadConfig",
    "DownloadInputError",
    "DownloadReport",
    "FAILURE_CLASSES",
    "MANIFEST_NAME",
    "VideoResult",
    "classify_error",
    "download_videos",
    "verify_video_file",
]


def verify_video_file(path: str | os.PathLike) -> bool:
    """True when ``path`` passes every check of :func:`k9bench.verify.verify_video`."""
    from k9bench.verify import verify_video

    return verify_video(path).ok
