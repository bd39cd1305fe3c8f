"""The download run: every ``scene -> url`` once, on a thread pool, the manifest kept current.

:func:`download_videos` checks every input first (:mod:`k9bench.download.checks`; nothing is
written for bad input), takes the folder's lock (a second run into the same folder waits),
then runs each video through :func:`k9bench.download.one.download_one` and keeps the manifest
(:mod:`k9bench.download.manifest`) current: written after each downloaded video, at most every few
seconds otherwise, and at the end (also when interrupted). Progress goes through
:class:`k9bench.progress.ProgressLog` (a bar on a terminal, otherwise a log line at least every
60 s and at each 10%).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, Mapping

from k9bench.artifacts import now_iso, provenance as make_provenance
from k9bench.artifact_io import write_json_atomic
from k9bench.download.checks import check_inputs, manifest_location, prepare_output_dir
from k9bench.download.one import Generator, VideoContext, download_one
from k9bench.download.settings import DownloadConfig
from k9bench.download.manifest import DownloadReport, VideoResult, load_previous_manifest
from k9bench.download.ytdlp import load_browser_cookies

log = logging.getLogger("k9bench.download")

WORK_DIRNAME = ".k9bench-download"
"""Hidden folder inside the output folder for in-progress downloads and yt-dlp's cache."""

MANIFEST_WRITE_INTERVAL_S = 5.0
"""During a run the manifest is refreshed at most this often (and after every downloaded video, and at the end)."""

STOP_GRACE_S = 30.0
"""On a stop (a signal, Ctrl-C), how long the videos in flight get to finish or abort (yt-dlp aborts at
its next progress update; a remux or a local generation finishes) before the manifest is written."""


@contextlib.contextmanager
def folder_lock(folder: Path):
    """Hold an exclusive ``flock`` on ``folder`` (the directory itself: nothing is created or deleted).

    A second run into the same folder (another job's ``--auto_download``) waits here, saying so,
    instead of writing the same partial files; it then skips what the first run verified. Where
    the file system has no ``flock`` (some network file systems), the run goes on unlocked
    (logged at DEBUG). ``download_videos.py`` itself refuses a second run at once instead
    (the stage's output lock, :func:`k9bench.stage.output_lock`).
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


def download_videos(
    videos: Mapping[str, str],
    output_dir: str | os.PathLike,
    config: DownloadConfig | None = None,
    *,
    provenance: dict | None = None,
    on_result: Callable[[VideoResult], None] | None = None,
    generators: Mapping[str, Generator] | None = None,
    stage_block: dict | None = None,
) -> DownloadReport:
    """Fetch every ``scene -> url`` video into ``output_dir`` as verified ``{scene}.mp4`` files.

    Each video is tried exactly once per run (yt-dlp retries requests inside that try); all
    videos are tried even when some fail. Returns the report; writes the manifest unless
    ``config.write_manifest`` is False. Raises
    :class:`~k9bench.download.failures.DownloadInputError` for bad input before writing
    anything; an interrupt (``KeyboardInterrupt``, the stage's ``Interrupted``) propagates after
    a manifest of the finished videos is written. ``on_result`` is called (from the calling
    thread) after each video. ``generators`` maps scenes that have no online source (the demo
    set) to a function that makes the video at the path it is given: those are made locally,
    verified and recorded like downloads, never fetched. ``stage_block`` is written into the
    manifest under ``stage``.
    """
    config = config or DownloadConfig()
    videos = dict(videos)
    generators = dict(generators or {})
    output_dir = Path(os.path.expanduser(str(output_dir))).absolute()
    ffmpeg = check_inputs(videos, output_dir, config)
    manifest_path = manifest_location(output_dir, config)
    browser_jar = None
    online = [s for s in videos if s not in generators]
    if config.cookies and config.cookies_from_browser:
        log.warning("both cookies options given: using the cookies file %s", config.cookies)
    elif config.cookies_from_browser and online:
        browser_jar = load_browser_cookies(config.cookies_from_browser)

    prepare_output_dir(output_dir)
    with folder_lock(output_dir):
        previous = load_previous_manifest(manifest_path)
        report = DownloadReport(
            output_dir=str(output_dir),
            manifest_path=str(manifest_path) if manifest_path else None,
            started_at=now_iso(),
            config=config.public_dict(),
            provenance=provenance if provenance is not None else make_provenance("k9bench.download.stage", [], None),
            earlier=dict(previous),
            stage=stage_block,
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
        ctx = VideoContext(
            output_dir=output_dir,
            work_root=work_root,
            cache_dir=work_root / "yt-dlp-cache",
            config=config,
            ffmpeg=ffmpeg,
            cookie_source=cookie_source,
            previous=previous,
            generators=generators,
        )
        local = len(videos) - len(online)
        log.info("%d video(s) into %s with %d worker(s)%s", len(videos), output_dir, config.workers,
                 f" ({local} made locally: no online source)" if local else "")
        try:
            _run_pool(videos, ctx, report, manifest_path, on_result)
        finally:
            _purge_cookie_copies(work_root)
        _cleanup_work_root(work_root)
        return report


def _run_pool(
    videos: dict,
    ctx: VideoContext,
    report: DownloadReport,
    manifest_path: Path | None,
    on_result: Callable[[VideoResult], None] | None,
) -> None:
    """Run every video through :func:`download_one` on a thread pool; keep the manifest current."""
    from k9bench.progress import ProgressLog

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

    progress = ProgressLog("download", len(videos), unit="videos") if ctx.config.progress else None
    pool = ThreadPoolExecutor(max_workers=ctx.config.workers, thread_name_prefix="k9dl")
    futures: list[Future] = []
    try:
        futures = [pool.submit(download_one, scene, url, ctx) for scene, url in videos.items()]
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            fetched = False
            for fut in finished:
                res = fut.result()
                done[res.scene_name] = res
                fetched = fetched or res.status == "ok"
                _log_result(res)
                if progress is not None:
                    progress.update(1, failed=int(res.status == "failed"))
                if on_result is not None:
                    on_result(res)
            if not finished and progress is not None:
                progress.update(0)  # a line at least every interval, even while one long video runs
            if pending and (fetched or (finished and time.monotonic() - last_write >= MANIFEST_WRITE_INTERVAL_S)):
                write_manifest(False)
    except BaseException:
        ctx.stop.set()  # in-flight yt-dlp downloads abort at their next progress update
        for fut in futures:
            fut.cancel()
        running = [f for f in futures if not f.cancelled() and not f.done()]
        if running:  # finish or abandon the units in flight, so none keeps writing after the run
            wait(running, timeout=STOP_GRACE_S)
        for fut in futures:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                res = fut.result()
                if res.scene_name not in done and not (res.status == "failed" and "interrupted" in (res.message or "")):
                    done[res.scene_name] = res
        pool.shutdown(wait=False, cancel_futures=True)
        if progress is not None:
            progress.close()
        try:
            write_manifest(False)
        except Exception:  # keep the original exception
            log.exception("could not write the manifest while stopping")
        raise
    pool.shutdown(wait=True)
    if progress is not None:
        progress.close()
    write_manifest(True)


def _log_result(res: VideoResult) -> None:
    if res.status == "failed":
        extra = f" HTTP {res.http_status}" if res.http_status else ""
        log.warning("%s: FAILED [%s%s] %s", res.scene_name, res.error_class, extra, res.message)
    elif res.status == "ok":
        fmt = res.format or {}
        log.info("%s: %s (%s, %sp, %.1f s)", res.scene_name, "made locally" if res.made_locally else "downloaded",
                 fmt.get("format_id"), fmt.get("height") or (res.video or {}).get("height") or "?", res.seconds)
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
