"""The download stage's settings: what to fetch and where (:class:`DownloadJob`), how
(:class:`DownloadConfig`), and the whole run (:class:`DownloadRun`).

This module imports nothing of the download engine, so the engine's parts
(:mod:`k9bench.download.ytdlp`, :mod:`k9bench.download.one`, :mod:`k9bench.download.run`) and other
stages (``eval_video_llm.py --auto_download`` reads :data:`DownloadConfig`'s defaults) can
import it without an import circle.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from k9bench.data.dataset import DatasetSettings
from k9bench.settings import setting
from k9bench.validators import MAX_WAIT_S, all_or_positive_int, at_most, non_negative_float, non_negative_int, positive_float, positive_int

DEFAULT_VIDEO_DIR = "./k9bench_videos"
"""Where the videos go (the reference's ``--output_dir`` default)."""


@dataclass(frozen=True)
class DownloadJob:
    """What ``download_videos.py`` fetches and where (the dataset is :class:`k9bench.data.dataset.DatasetSettings`)."""

    output_dir: str = setting(DEFAULT_VIDEO_DIR, "folder for the {scene}.mp4 files")
    max_samples: int = setting(-1, "only the videos of the first N questions (-1: all; 0 is refused)", type=all_or_positive_int,
                               result=True)


@dataclass(frozen=True)
class DownloadConfig:
    """How to download. The fields with a flag are ``download_videos.py``'s options (the flags are
    generated from them); the others are for library callers and tests."""

    workers: int = setting(4, "videos downloaded in parallel", type=at_most(positive_int, 256))
    retries: int = setting(3, "retries per request/fragment inside yt-dlp (with backoff)", type=at_most(non_negative_int, 100))
    timeout: float = setting(30.0, "seconds without data before a connection counts as stalled", type=at_most(positive_float, MAX_WAIT_S))
    cookies: str | None = setting(None, "Netscape cookies.txt for YouTube (never modified)")
    cookies_from_browser: str | None = setting(
        None, "read YouTube cookies from a browser (e.g. firefox, chrome)", metavar="BROWSER[+KEYRING][:PROFILE][::CONTAINER]"
    )
    sleep_interval: float = setting(0.0, "seconds each worker waits before each download", type=at_most(non_negative_float, 3600.0))
    manifest: str | None = setting(None, "manifest JSON path (default: <output_dir>/download_manifest.json)")
    reverify: bool = setting(
        False,
        "verify every existing file again, even those an earlier manifest recorded as verified and unchanged",
        action="store_true",
    )
    max_height: int = setting(
        720, "preferred largest frame height: the largest format at or below it wins, else the smallest above", cli=False,
        result=True,
    )
    write_manifest: bool = setting(True, "False keeps the report in memory only", cli=False)
    progress: bool = setting(True, "progress over videos (k9bench.progress: a bar on a terminal, else log lines)", cli=False)
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


@dataclass(frozen=True)
class DownloadRun:
    """One run of the download stage (``download_videos.py`` or the pipeline's download step):
    built by :func:`k9bench.download.stage.config_from_argv`."""

    dataset: DatasetSettings = field(default_factory=DatasetSettings)
    job: DownloadJob = field(default_factory=DownloadJob)
    config: DownloadConfig = field(default_factory=DownloadConfig)
    argv: tuple[str, ...] = ()
    """The command line as given (for the manifest's provenance; secrets are masked there)."""
    script: str = "download_videos.py"
    """What ran the stage, for the provenance."""
