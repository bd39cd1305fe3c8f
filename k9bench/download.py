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
2. Otherwise yt-dlp (:mod:`k9bench.ytdlp`, ``noplaylist``) downloads into a private work
   folder ``<output>/.k9bench-download/<scene>.<url hash>/`` preferring the largest
   format at or below 720p (mp4/h264 first); a work folder left by another URL
   for the same scene is wiped, so a ``.part`` is only ever resumed for its own URL.
3. The file is probed, remuxed by ffmpeg (stream copy, ``+faststart``) into a
   temporary ``.mp4``, verified, and atomically renamed to ``{scene}.mp4``.
4. On failure the work folder is removed: nothing invalid stays in the folder.

Each outcome is a :class:`~k9bench.manifest.VideoResult` (``ok``/``skipped``/``failed`` with a
failure class from :data:`~k9bench.download_failures.FAILURE_CLASSES`). The manifest
(:mod:`k9bench.manifest`: JSON, written atomically, refreshed during the run) lists them all
with summary counts.

Bad input (a URL that is not YouTube, a scene id that is not 11 safe characters, an output
folder or manifest that cannot be written, no ffmpeg, a missing cookies file, an unknown
browser, a settings value out of range) raises :class:`DownloadInputError` (one line naming
every culprit) before anything is written.

The modules: this one (settings, input checks, one video, the run), :mod:`k9bench.ytdlp`
(yt-dlp parameters and one fetch), :mod:`k9bench.download_failures` (failure classes) and
:mod:`k9bench.manifest` (entries, report, what a rerun trusts).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import math
import os
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
from k9bench.download_failures import (
    FAILURE_CLASSES,
    NO_FORMAT_HINT,
    DownloadInputError,
    VideoFailure,
    classify_error,
    clean_message,
)
from k9bench.manifest import (
    MANIFEST_NAME,
    MANIFEST_VERSION,
    STATUSES,
    DownloadReport,
    VideoResult,
    count_statuses,
    load_previous_manifest,
    verified_earlier,
)
from k9bench.settings import setting
from k9bench.validators import int_at_least, non_negative_float, non_negative_int, positive_float, positive_int
from k9bench.youtube import InvalidYouTubeURL, is_valid_scene_name, parse_youtube_id
from k9bench.ytdlp import (
    SeenWarnings,
    downloaded_file,
    fetch,
    format_info,
    format_sort,
    load_browser_cookies,
    parse_browser_spec,
    ydl_params,
)

log = logging.getLogger(__name__)

WORK_DIRNAME = ".k9bench-download"
"""Hidden folder inside the output folder for in-progress downloads and yt-dlp's cache."""

MANIFEST_WRITE_INTERVAL_S = 5.0
"""During a run the manifest is refreshed at most this often (and always at the end)."""


# ---------------------------------------------------------------------------
# Settings


@dataclass(frozen=True)
class DownloadJob:
    """What ``download_videos.py`` fetches and where (the dataset is :class:`k9bench.dataset.DatasetSettings`)."""

    output_dir: str = setting("./k9bench_videos", "folder for the {scene}.mp4 files")
    max_samples: int = setting(-1, "only the videos of the first N questions (-1: all)", type=int_at_least(-1))


@dataclass(frozen=True)
class DownloadConfig:
    """How to download. The fields with a flag are ``download_videos.py``'s options (the flags are
    generated from them); the others are for library callers and tests."""

    workers: int = setting(4, "videos downloaded in parallel", type=positive_int)
    retries: int = setting(3, "retries per request/fragment inside yt-dlp (with backoff)", type=non_negative_int)
    timeout: float = setting(30.0, "seconds without data before a connection counts as stalled", type=positive_float)
    cookies: str | None = setting(None, "Netscape cookies.txt for YouTube (never modified)")
    cookies_from_browser: str | None = setting(
        None, "read YouTube cookies from a browser (e.g. firefox, chrome)", metavar="BROWSER[+KEYRING][:PROFILE][::CONTAINER]"
    )
    sleep_interval: float = setting(0.0, "seconds each worker waits before each download", type=non_negative_float)
    manifest: str | None = setting(None, "manifest JSON path (default: <output_dir>/download_manifest.json)")
    reverify: bool = setting(
        False,
        "verify every existing file again, even those an earlier manifest recorded as verified and unchanged",
        action="store_true",
    )
    max_height: int = setting(
        720, "preferred largest frame height: the largest format at or below it wins, else the smallest above", cli=False
    )
    write_manifest: bool = setting(True, "False keeps the report in memory only", cli=False)
    progress: bool = setting(True, "a tqdm bar over videos (still subject to K9BENCH_NO_PROGRESS)", cli=False)
    ffmpeg_timeout: float = setting(900.0, "seconds allowed for one remux", cli=False)
    allowed_extractors: tuple[str, ...] | None = setting(
        None, "yt-dlp extractor names allowed (regexes); None: yt-dlp's default set (tests restrict it to their fake)", cli=False
    )
    ydl_overrides: Mapping[str, Any] | None = setting(
        None, "extra yt-dlp parameters merged last (advanced use and tests)", cli=False
    )

    @property
    def manifest_path(self) -> str | None:
        """The ``--manifest`` path as given (None: ``<output_dir>/download_manifest.json``)."""
        return self.manifest

    def public_dict(self) -> dict:
        """The settings as recorded in the manifest (cookie paths kept, no cookie content; the
        names of the yt-dlp overrides, not their values)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "ydl_overrides":
                value = sorted(value) if value else None
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out


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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_config(config: DownloadConfig) -> list[str]:
    """Problems with the settings (empty when all is well): the same rules as the flags' value
    types, for library callers that build the object themselves; plus the cookie sources."""
    problems = []
    if not _is_int(config.workers) or config.workers < 1:
        problems.append(f"workers must be at least 1 (got {config.workers!r})")
    if not _is_int(config.retries) or config.retries < 0:
        problems.append(f"retries must be 0 or more (got {config.retries!r})")
    if not _is_number(config.timeout) or config.timeout <= 0:
        problems.append(f"timeout must be a finite number of seconds > 0 (got {config.timeout!r})")
    if not _is_number(config.sleep_interval) or config.sleep_interval < 0:
        problems.append(f"sleep_interval must be a finite number of seconds >= 0 (got {config.sleep_interval!r})")
    if not _is_number(config.ffmpeg_timeout) or config.ffmpeg_timeout <= 0:
        problems.append(f"ffmpeg_timeout must be a finite number of seconds > 0 (got {config.ffmpeg_timeout!r})")
    if not _is_int(config.max_height) or config.max_height < 1:
        problems.append(f"max_height must be a positive integer (got {config.max_height!r})")
    if config.cookies:
        path = Path(os.path.expanduser(config.cookies))
        if path.is_dir():
            problems.append(f"cookies file {config.cookies}: is a folder")
        elif not path.is_file():
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


def manifest_location(output_dir: Path, config: DownloadConfig) -> Path | None:
    """Where the manifest goes (None when ``config.write_manifest`` is False)."""
    if not config.write_manifest:
        return None
    if config.manifest:
        return Path(os.path.expanduser(config.manifest)).absolute()
    return output_dir / MANIFEST_NAME


def check_destination(output_dir: Path, config: DownloadConfig) -> tuple[list[str], str]:
    """Problems with where the run would write (output folder, manifest) and with ffmpeg; and
    the ffmpeg to use. Cheap and independent of the videos: a script asks it before loading a
    dataset. Writes nothing: folders are checked where they would be created."""
    from k9bench.ffmpeg import FFmpegNotFound, find_ffmpeg

    problems = []
    output_problem = check_writable_target(output_dir, "output folder")
    if output_problem:
        problems.append(output_problem)
    manifest_path = manifest_location(output_dir, config)
    if manifest_path is not None:
        if manifest_path.is_dir():
            problems.append(f"manifest {manifest_path}: is a folder")
        elif not (output_problem and manifest_path.parent == output_dir):  # said once is enough
            problem = check_writable_target(manifest_path.parent, "manifest folder")
            if problem:
                problems.append(problem)
    try:
        ffmpeg = find_ffmpeg()
    except FFmpegNotFound as exc:
        problems.append(str(exc))
        ffmpeg = ""
    return problems, ffmpeg


def input_error(problems: list[str]) -> DownloadInputError:
    """One :class:`DownloadInputError` naming every problem, on one line."""
    return DownloadInputError("cannot start the download: " + "; ".join(" ".join(p.split()) for p in problems))


def check_inputs(videos: Mapping[str, str], output_dir: Path, config: DownloadConfig) -> str:
    """Every input problem at once, as one :class:`DownloadInputError` (one line); else the ffmpeg to use."""
    problems = check_videos(videos) + check_config(config)
    destination_problems, ffmpeg = check_destination(output_dir, config)
    problems += destination_problems
    if problems:
        raise input_error(problems)
    return ffmpeg


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
# ffmpeg


def remux_faststart(src: Path, dst: Path, *, ffmpeg_timeout: float) -> None:
    """Stream-copy ``src`` into an mp4 at ``dst`` with the index first; raise :class:`VideoFailure` on error."""
    from k9bench.ffmpeg import run_ffmpeg

    args = ["-i", str(src), "-map", "0:v:0", "-map", "0:a:0?", "-c", "copy", "-movflags", "+faststart", "-f", "mp4", str(dst)]
    try:
        run_ffmpeg(args, timeout=ffmpeg_timeout)
    except subprocess.CalledProcessError as exc:
        detail = clean_message(exc.stderr or "") or f"exit status {exc.returncode}"
        raise VideoFailure("ffmpeg_error", f"ffmpeg remux failed: {detail}") from None
    except subprocess.TimeoutExpired:
        raise VideoFailure("ffmpeg_error", f"ffmpeg remux took longer than {ffmpeg_timeout:g} s") from None
    except OSError as exc:
        raise VideoFailure("ffmpeg_error", f"ffmpeg could not run: {exc}") from None


# ---------------------------------------------------------------------------
# One video


@dataclass
class _Context:
    """What every worker of one run shares."""

    output_dir: Path
    work_root: Path
    cache_dir: Path
    config: DownloadConfig
    ffmpeg: str
    cookie_source: Path | None
    stop: threading.Event = field(default_factory=threading.Event)
    previous: dict = field(default_factory=dict)
    seen_warnings: SeenWarnings = field(default_factory=SeenWarnings)


def _url_key(url: str) -> str:
    return hashlib.sha256(url.encode("utf-8")).hexdigest()[:10]


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
    except VideoFailure as fail:
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
        earlier = verified_earlier(final, ctx.previous.get(scene))
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

    work = ctx.work_root / f"{scene}.{_url_key(url)}"
    for stale in ctx.work_root.glob(f"{scene}.*"):
        if stale != work and stale.is_dir():
            log.info("%s: discarding a partial download left for another URL (%s)", scene, stale.name)
            shutil.rmtree(stale, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    try:
        warnings: list[str] = []
        result.warnings = warnings
        info = fetch(scene, url, work, config=ctx.config, ffmpeg=ctx.ffmpeg, cache_dir=ctx.cache_dir,
                     cookie_source=ctx.cookie_source, stop=ctx.stop, seen=ctx.seen_warnings, warnings=warnings)
        result.format = format_info(info)
        height = (result.format or {}).get("height")
        if isinstance(height, int) and height > ctx.config.max_height:
            log.warning("%s: no format at or below %dp; took %dp", scene, ctx.config.max_height, height)
        src = downloaded_file(info, work, scene)
        if src is None:
            raise VideoFailure("error", "yt-dlp reported success but no file was written")
        ok, reason = probe_media(src)
        if not ok:
            raise VideoFailure("invalid_file", f"the downloaded file is not a usable video: {reason}")
        tmp = work / f"{scene}.remux.mp4"
        remux_faststart(src, tmp, ffmpeg_timeout=ctx.config.ffmpeg_timeout)
        check = verify_video(tmp)
        if not check.ok:
            raise VideoFailure("invalid_file", f"the remuxed file fails verification: {check.reason}")
        os.replace(tmp, final)
        shutil.rmtree(work, ignore_errors=True)
        note = f"replaced an invalid existing file ({result.replaced_invalid})" if result.replaced_invalid else None
        return finish("ok", file=final.name, size_bytes=check.size, video=check.to_dict(), message=note,
                      mtime_ns=final.stat().st_mtime_ns)
    except VideoFailure as fail:
        shutil.rmtree(work, ignore_errors=True)
        return finish("failed", error_class=fail.error_class, http_status=fail.http_status, message=fail.message)
    except Exception as exc:  # an unexpected bug or OS error: recorded, never fatal for the other videos
        log.debug("%s: unexpected failure", scene, exc_info=True)
        shutil.rmtree(work, ignore_errors=True)
        return finish("failed", error_class="error", message=f"{type(exc).__name__}: {exc}"[:500])


# ---------------------------------------------------------------------------
# The run


def download_videos(
    videos: Mapping[str, str],
    output_dir: str | os.PathLike,
    config: DownloadConfig | None = None,
    *,
    provenance: dict | None = None,
    on_result: Callable[[VideoResult], None] | None = None,
    make_local: Callable[[Path, list[str]], None] | None = None,
) -> DownloadReport:
    """Fetch every ``scene -> url`` video into ``output_dir`` as verified ``{scene}.mp4`` files.

    Each video is tried exactly once per run (yt-dlp retries requests inside
    that try); all videos are tried even when some fail. Returns the report;
    writes the manifest unless ``config.write_manifest`` is False. Raises
    :class:`DownloadInputError` for bad input before writing anything, and
    ``KeyboardInterrupt`` after writing a manifest of the finished videos.
    ``on_result`` is called (from the calling thread) after each video.
    ``make_local(folder, missing scenes)`` is called once, after every input check and
    under the folder's lock, to make videos that have no online source (the demo set);
    whatever it makes is then verified and skipped like any file already present.
    """
    config = config or DownloadConfig()
    videos = dict(videos)
    output_dir = Path(os.path.expanduser(str(output_dir))).absolute()
    ffmpeg = check_inputs(videos, output_dir, config)
    manifest_path = manifest_location(output_dir, config)
    browser_jar = None
    if config.cookies and config.cookies_from_browser:
        log.warning("both cookies options given: using the cookies file %s", config.cookies)
    elif config.cookies_from_browser:
        browser_jar = load_browser_cookies(config.cookies_from_browser)

    prepare_output_dir(output_dir)
    # One run at a time per folder: two runs fetching the same video would write the same .part.
    with folder_lock(output_dir):
        if make_local is not None:
            missing = [s for s in videos if not (output_dir / f"{s}.mp4").exists()]
            if missing:
                make_local(output_dir, missing)
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
                    counts = count_statuses(done.values())
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
    """Remove the work folder when nothing but an empty yt-dlp cache is left in it."""
    try:
        entries = [p for p in work_root.iterdir() if p.name != "yt-dlp-cache"]
        cache = work_root / "yt-dlp-cache"
        if not entries and (not cache.exists() or not any(cache.iterdir())):
            shutil.rmtree(work_root, ignore_errors=True)
    except OSError:
        pass


def verify_video_file(path: str | os.PathLike) -> bool:
    """True when ``path`` passes every check of :func:`k9bench.verify.verify_video`."""
    from k9bench.verify import verify_video

    return verify_video(path).ok


__all__ = [
    "FAILURE_CLASSES",
    "MANIFEST_NAME",
    "MANIFEST_VERSION",
    "NO_FORMAT_HINT",
    "STATUSES",
    "WORK_DIRNAME",
    "DownloadConfig",
    "DownloadInputError",
    "DownloadJob",
    "DownloadReport",
    "VideoFailure",
    "VideoResult",
    "check_config",
    "check_destination",
    "check_inputs",
    "check_videos",
    "check_writable_target",
    "classify_error",
    "download_videos",
    "format_sort",
    "load_browser_cookies",
    "parse_browser_spec",
    "verify_video_file",
    "ydl_params",
]
