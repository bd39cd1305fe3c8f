"""One video of a download: bring ``{scene}.mp4`` into the folder, verified, or explain why not.

:func:`download_one` never raises for a video problem: whatever goes wrong becomes that video's
:class:`~k9bench.download.manifest.VideoResult` (``ok``, ``skipped`` or ``failed`` with a failure class),
so the other videos of the run go on. The steps:

1. a file already present and verified (or recorded verified and unchanged by the earlier
   manifest) is ``skipped``, keeping what the earlier manifest knew about it (the format yt-dlp
   fetched, when and with which warnings); a complete file whose only fault is the index at the
   end is remuxed locally; any other file that fails verification is deleted;
2. a scene with a local generator (the demo set: :func:`k9bench.data.demo.demo_generators`) is made
   locally, never fetched; otherwise yt-dlp (:mod:`k9bench.download.ytdlp`) downloads it into a private
   work folder ``<output>/.k9bench-download/<scene>.<url hash>/``;
3. the download is probed, remuxed by ffmpeg (stream copy, ``+faststart``), verified and
   atomically renamed to ``{scene}.mp4``; on failure the work folder is removed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from k9bench.artifacts import now_iso
from k9bench.download.failures import VideoFailure, clean_message
from k9bench.download.settings import DownloadConfig
from k9bench.download.manifest import GENERATED_FORMAT, VideoResult, earlier_facts, verified_earlier
from k9bench.download.ytdlp import SeenWarnings, downloaded_file, fetch, format_info

log = logging.getLogger("k9bench.download")

Generator = Callable[[Path], Any]
"""Makes one video at the path given (a local source: the demo set's videos)."""


@dataclass
class VideoContext:
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
    generators: Mapping[str, Generator] = field(default_factory=dict)


def remux_faststart(src: Path, dst: Path, *, ffmpeg_timeout: float) -> None:
    """Stream-copy ``src`` into an mp4 at ``dst`` with the index first; raise :class:`VideoFailure` on error."""
    from k9bench.video.ffmpeg import run_ffmpeg

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


def url_key(url: str) -> str:
    """A short hash of the URL: the work folder of one URL is never resumed for another."""
    return hashlib.sha256(url.encode("utf-8")).hexdigest()[:10]


def _faststart_existing(final: Path, ctx: VideoContext):
    """Remux a complete but not-faststart ``final`` in place; the verified result, or None if that failed."""
    from k9bench.download.verify import verify_video

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


def download_one(scene: str, url: str, ctx: VideoContext) -> VideoResult:
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


def _download_one(scene: str, url: str, ctx: VideoContext) -> VideoResult:
    from k9bench.download.verify import verify_video

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
        previous = ctx.previous.get(scene)
        earlier = None if ctx.config.reverify else verified_earlier(final, previous)
        if earlier is not None:
            return finish("skipped", file=final.name, size_bytes=earlier.get("size_bytes"), video=earlier.get("video"),
                          mtime_ns=final.stat().st_mtime_ns, message="verified by an earlier run; unchanged since",
                          **earlier_facts(earlier, final))
        check = verify_video(final)
        if check.ok:
            return finish("skipped", file=final.name, size_bytes=check.size, video=check.to_dict(), mtime_ns=final.stat().st_mtime_ns,
                          **earlier_facts(previous, final))
        if check.only_not_faststart:
            fixed = _faststart_existing(final, ctx)
            if fixed is not None:
                return finish("ok", file=final.name, size_bytes=fixed.size, video=fixed.to_dict(), mtime_ns=final.stat().st_mtime_ns,
                              downloaded_at=now_iso(),
                              message="the existing file had its index at the end: remuxed to faststart locally, no download")
        what = "making it again" if scene in ctx.generators else "deleting it and downloading again"
        log.warning("%s: the existing file fails verification (%s); %s", final, check.reason, what)
        result.replaced_invalid = check.reason
        final.unlink(missing_ok=True)

    work = ctx.work_root / f"{scene}.{url_key(url)}"
    for stale in ctx.work_root.glob(f"{scene}.*"):
        if stale != work and stale.is_dir():
            log.info("%s: discarding a partial download left for another URL (%s)", scene, stale.name)
            shutil.rmtree(stale, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    try:
        if scene in ctx.generators:
            tmp = _generate(scene, work, ctx.generators[scene], result)
        else:
            tmp = _fetch(scene, url, work, ctx, result)
        check = verify_video(tmp)
        if not check.ok:
            raise VideoFailure("invalid_file", f"the {'generated' if scene in ctx.generators else 'remuxed'} file fails "
                                               f"verification: {check.reason}")
        os.replace(tmp, final)
        shutil.rmtree(work, ignore_errors=True)
        note = f"replaced an invalid existing file ({result.replaced_invalid})" if result.replaced_invalid else None
        if scene in ctx.generators:
            note = "; ".join(n for n in ("made locally (no online source)", note) if n)
        return finish("ok", file=final.name, size_bytes=check.size, video=check.to_dict(), message=note,
                      mtime_ns=final.stat().st_mtime_ns, downloaded_at=now_iso())
    except VideoFailure as fail:
        shutil.rmtree(work, ignore_errors=True)
        return finish("failed", error_class=fail.error_class, http_status=fail.http_status, message=fail.message)
    except Exception as exc:  # an unexpected bug or OS error: recorded, never fatal for the other videos
        log.debug("%s: unexpected failure", scene, exc_info=True)
        shutil.rmtree(work, ignore_errors=True)
        return finish("failed", error_class="error", message=f"{type(exc).__name__}: {exc}"[:500])


def _generate(scene: str, work: Path, generator: Generator, result: VideoResult) -> Path:
    """Make ``scene`` locally in ``work``; the file to verify (already a faststart mp4: no remux)."""
    tmp = work / f"{scene}.mp4"
    try:
        generator(tmp)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise VideoFailure("ffmpeg_error", f"could not make the video locally: {clean_message(str(exc))}") from None
    result.format = dict(GENERATED_FORMAT)
    return tmp


def _fetch(scene: str, url: str, work: Path, ctx: VideoContext, result: VideoResult) -> Path:
    """Download ``scene`` with yt-dlp and remux it; the file to verify."""
    from k9bench.download.verify import probe_media

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
    return tmp
