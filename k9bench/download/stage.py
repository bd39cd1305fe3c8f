"""Fetching K9-Bench videos: each video once, verified, in parallel, every failure explained.

The download stage (``download_videos.py``, and the pipeline's download step) is
:class:`DownloadStage` (the :class:`k9bench.stage.Stage` contract) built from the command line by
:func:`config_from_argv`; its flags are :func:`build_parser`'s. ``eval_video_llm.py --auto_download``
calls :func:`fetch_for_questions`, the same engine. Library use::

    from k9bench.download.stage import DownloadConfig, download_videos

    report = download_videos({"dQw4w9WgXcQ": "https://youtu.be/dQw4w9WgXcQ"}, "k9bench_videos",
                             DownloadConfig(workers=4))
    report.counts          # {"ok": 1, "skipped": 0, "failed": 0}
    report.exit_code       # 0 when nothing failed
    report.ok_scenes       # scenes whose {scene}.mp4 is now present and verified

The parts: :mod:`k9bench.download.settings` (the settings), :mod:`k9bench.download.checks` (input
checks), :mod:`k9bench.download.run` (the run over all videos), :mod:`k9bench.download.one` (one
video), :mod:`k9bench.download.ytdlp` (yt-dlp), :mod:`k9bench.download.failures` (failure classes),
:mod:`k9bench.download.manifest` (entries, report, what a rerun trusts) and :mod:`k9bench.download.verify`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from pathlib import Path
from typing import Mapping

from k9bench.data.dataset import DatasetSettings
from k9bench.download.checks import (
    check_config,
    check_destination,
    check_inputs,
    check_videos,
    input_error,
    manifest_location,
)
from k9bench.download.failures import FAILURE_CLASSES, NO_FORMAT_HINT, DownloadInputError, VideoFailure, classify_error
from k9bench.download.run import WORK_DIRNAME, download_videos
from k9bench.download.settings import DownloadConfig, DownloadJob, DownloadRun
from k9bench.download.manifest import MANIFEST_NAME, MANIFEST_VERSION, STATUSES, DownloadReport, VideoResult
from k9bench.settings import add_arguments, result_fingerprint
from k9bench.stage import Stage, StageError
from k9bench.download.ytdlp import format_sort, load_browser_cookies, parse_browser_spec, ydl_params

log = logging.getLogger("k9bench.download")

_CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(DownloadConfig))


def build_parser() -> argparse.ArgumentParser:
    """``download_videos.py``'s flags, generated from the settings classes."""
    from k9bench.cli import ArgumentParser, DefaultsHelpFormatter, add_logging_args
    from k9bench.download.settings import DownloadConfig as config_class  # the class itself, never a wrapper

    parser = ArgumentParser(
        prog="download_videos.py",
        description="Download K9-Bench videos with yt-dlp, remux to faststart mp4, verify each file.",
        formatter_class=DefaultsHelpFormatter,
    )
    add_arguments(parser, DatasetSettings)
    add_arguments(parser, DownloadJob)
    add_arguments(parser, config_class)
    add_logging_args(parser)
    return parser


def config_from_argv(argv: list[str] | None, *, script: str = "download_videos.py") -> DownloadRun:
    """The frozen settings of one download run. argparse's own errors exit 2 (SystemExit); a cookies
    file that is missing or a folder, or an unknown browser, raises :class:`DownloadInputError` (a
    :class:`~k9bench.stage.StageError`, exit 2) naming the flag, before any dataset or video is read."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    return run_from_namespace(build_parser().parse_args(argv), argv, script=script)


def run_from_namespace(args: argparse.Namespace, argv: list[str], *, script: str = "download_videos.py") -> DownloadRun:
    """:func:`config_from_argv`'s step from parsed flags to the frozen settings."""
    values = vars(args)
    dataset = DatasetSettings(**{f.name: values[f.name] for f in dataclasses.fields(DatasetSettings)})
    job = DownloadJob(**{f.name: values[f.name] for f in dataclasses.fields(DownloadJob)})
    # DownloadConfig looked up at call time and given only the flags' fields, so a caller that wraps it
    # with fixed library-only fields (the tests pin yt-dlp to their fake extractor) keeps them.
    config = DownloadConfig(**{name: values[name] for name in _CONFIG_FIELDS if name in values})
    problems = check_config(config)
    if problems:
        raise input_error(problems)
    return DownloadRun(dataset=dataset, job=job, config=config, argv=tuple(argv), script=script)


def fetch_for_questions(videos: Mapping[str, str], video_dir: str | os.PathLike, config: DownloadConfig, *,
                        dataset_name: str, soundtrack: bool = False) -> DownloadReport:
    """:func:`download_videos` for the videos of a set of questions (``--auto_download``): the demo set's
    videos (``dataset_name`` ``demo``) are made locally (with their soundtracks when ``soundtrack``),
    a corrupt one is made again; nothing of the demo set is looked for online."""
    from k9bench.data.demo import demo_generators, is_demo_dataset

    generators = demo_generators(videos, soundtrack=soundtrack) if is_demo_dataset(dataset_name) else {}
    return download_videos(videos, video_dir, config, generators=generators)


class DownloadStage(Stage):
    """The download as a stage: its output is the manifest (holding the stage block) beside the videos.

    ``done()`` adds to the contract's checks: the last run completed with no failure, and every video
    it recorded is still present with its recorded size."""

    name = "download"

    def __init__(self, settings: DownloadRun):
        self.settings = settings

    @property
    def output_dir(self) -> Path:
        return Path(os.path.expanduser(self.settings.job.output_dir)).absolute()

    def manifest_path(self) -> Path:
        return manifest_location(self.output_dir, dataclasses.replace(self.settings.config, write_manifest=True))

    def outputs(self) -> list[Path]:
        return [self.manifest_path()]

    def output_flags(self) -> list[str]:
        return ["--manifest" if self.settings.config.manifest else "--output_dir"]

    def inputs(self) -> list[Path]:
        path = Path(os.path.expanduser(self.settings.dataset.dataset_name))
        return [path] if path.is_file() else []

    def fingerprint(self) -> dict:
        s = self.settings
        return result_fingerprint(s.dataset, s.job, s.config)

    def done(self) -> str | None:
        reason = super().done()
        if reason:
            return reason
        from k9bench.artifact_io import ArtifactError, read_json

        path = self.manifest_path()
        try:
            data = read_json(path)
        except ArtifactError as exc:
            return str(exc)
        if not data.get("complete"):
            return f"{path}: the last download was interrupted"
        videos = data.get("videos") if isinstance(data.get("videos"), list) else []
        failed = sum(1 for v in videos if isinstance(v, dict) and v.get("status") == "failed")
        if failed:
            return f"{path}: {failed} video(s) failed last time"
        for entry in videos:
            file = self.output_dir / str(entry.get("file") or "")
            if not file.is_file() or file.stat().st_size != entry.get("size_bytes"):
                return f"{file} is missing or changed since the last download"
        return None

    def run(self) -> int:
        from k9bench.artifacts import provenance
        from k9bench.data.dataset import DatasetError, load_selected, select_range, unique_videos
        from k9bench.data.demo import demo_generators, is_demo_dataset

        s = self.settings
        problems, _ = check_destination(self.output_dir, s.config)
        if problems:
            raise input_error(problems)
        try:
            loaded = load_selected(s.dataset)
        except DatasetError as exc:
            raise DownloadInputError(str(exc)) from None
        questions = select_range(loaded.questions, 0, None, s.job.max_samples)
        videos = unique_videos(questions)
        log.info("%d question(s) use %d distinct video(s)", len(questions), len(videos))
        generators = demo_generators(videos) if is_demo_dataset(s.dataset.dataset_name) else {}
        flat = {**dataclasses.asdict(s.dataset), **dataclasses.asdict(s.job), **s.config.public_dict()}
        report = download_videos(videos, s.job.output_dir, s.config, provenance=provenance(s.script, list(s.argv), flat),
                                 generators=generators, stage_block=self.stage_block())
        log_outcome(report)
        return report.exit_code


def log_outcome(report: DownloadReport) -> None:
    """The summary line, each failure, and what to do about the common ones."""
    log.info("%s", report.summary_line())
    for res in report.failed:
        status = f" HTTP {res.http_status}" if res.http_status else ""
        log.error("failed %s [%s%s]: %s", res.scene_name, res.error_class, status, res.message)
    if report.failed_by_class.get("sign_in_required"):
        log.error("YouTube asked for a sign-in (bot check or age gate): pass --cookies FILE or --cookies_from_browser BROWSER")
    if any(r.http_status in (403, 429) for r in report.failed):
        log.error("HTTP 403/429 usually means rate limiting: rerun later with fewer --workers, a --sleep_interval and cookies")
    if report.failed:
        log.error("rerun the same command to retry the failed videos (verified files are skipped)")
    if report.manifest_path:
        log.info("manifest: %s", report.manifest_path)


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
    "DownloadRun",
    "DownloadStage",
    "StageError",
    "VideoFailure",
    "VideoResult",
    "build_parser",
    "check_config",
    "check_destination",
    "check_inputs",
    "check_videos",
    "classify_error",
    "config_from_argv",
    "download_videos",
    "fetch_for_questions",
    "format_sort",
    "load_browser_cookies",
    "parse_browser_spec",
    "ydl_params",
]
