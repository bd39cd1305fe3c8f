"""Download the K9-Bench videos: each once, verified, in parallel, with every failure explained.

Every distinct video of the selected questions is fetched with yt-dlp (an mp4 of at most
720p preferred), remuxed by ffmpeg into a faststart mp4 (stream copy), verified, and saved
as ``{scene}.mp4``. Files already present and verified are skipped, so a rerun resumes.
A manifest (JSON) lists every video as ok / skipped / failed with the failure class.

Examples::

    python download_videos.py                                   # all videos of ogmen/K9Bench (test)
    python download_videos.py --max_samples 10 --output_dir ./k9bench_videos
    python download_videos.py --workers 8 --cookies cookies.txt # YouTube bot checks: pass cookies
    python download_videos.py --cookies_from_browser firefox --sleep_interval 2
    python download_videos.py --dataset_name demo --output_dir demo_videos   # generated locally

Exit status: 0 every video present and verified; 1 some failed (after trying all of them);
2 bad input (a flag value, dataset, URL, scene id, output folder, manifest, ffmpeg, cookies),
refused before any video is generated or downloaded; 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from k9bench.cli import ArgumentParser, add_logging_args, setup_logging
from k9bench.dataset import DatasetSettings  # light: no datasets, yt-dlp or torch behind these
from k9bench.download import DownloadConfig, DownloadJob
from k9bench.settings import add_arguments, from_namespace

log = logging.getLogger("download_videos")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        description="Download K9-Bench videos with yt-dlp, remux to faststart mp4, verify each file.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_arguments(parser, DatasetSettings)
    add_arguments(parser, DownloadJob)
    add_arguments(parser, DownloadConfig)
    add_logging_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose, args.quiet)

    import dataclasses

    from k9bench import download as kd  # its parts looked up at call time: the tests substitute some
    from k9bench.artifacts import provenance

    dataset = from_namespace(DatasetSettings, args)
    job = from_namespace(DownloadJob, args)
    # Only the flags' fields are passed to kd.DownloadConfig, so a caller that wraps it with
    # fixed library-only fields (the tests pin yt-dlp to their fake extractor) keeps them.
    config_fields = {f.name for f in dataclasses.fields(DownloadConfig)}
    config = kd.DownloadConfig(**{name: value for name, value in vars(args).items() if name in config_fields})
    run_provenance = provenance("download_videos.py", list(sys.argv[1:] if argv is None else argv), vars(args))
    try:
        return run(dataset, job, config, run_provenance)
    except KeyboardInterrupt:
        log.error("interrupted; finished videos are kept and a rerun resumes")
        return 130


def run(dataset: DatasetSettings, job: DownloadJob, config: DownloadConfig, run_provenance: dict) -> int:
    """Check where the videos go, load the questions, download their videos; the exit status."""
    from k9bench import download as kd
    from k9bench.dataset import DEMO_NAME, DatasetError, load_selected, select_range, unique_videos

    # Where the videos would go, before the dataset is loaded (a Hub dataset is a download too);
    # the download checks everything again, the videos and cookies included, before writing.
    problems, _ = kd.check_destination(Path(job.output_dir).expanduser().absolute(), config)
    if problems:
        log.error("%s", kd.input_error(problems))
        return 2
    try:
        loaded = load_selected(dataset)
    except DatasetError as exc:
        log.error("%s", exc)
        return 2
    questions = select_range(loaded.questions, 0, None, job.max_samples)
    videos = unique_videos(questions)
    log.info("%d question(s) use %d distinct video(s)", len(questions), len(videos))
    extra = {"make_local": _generate_demo_videos} if dataset.dataset_name == DEMO_NAME else {}
    try:
        report = kd.download_videos(videos, job.output_dir, config, provenance=run_provenance, **extra)
    except kd.DownloadInputError as exc:
        log.error("%s", exc)
        return 2
    _log_outcome(report)
    return report.exit_code


def _log_outcome(report) -> None:
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


def _generate_demo_videos(folder, missing: list[str]) -> None:
    """The demo set has no online videos: generate the missing ones locally (they then verify and skip).

    Called by the download after every input check, so a bad flag never leaves generated files.
    """
    from k9bench.demo import DEMO_VIDEOS, make_demo_videos

    if any(scene in DEMO_VIDEOS for scene in missing):
        log.info("generating %d demo video(s) locally (the demo set has no online videos)", len(missing))
        make_demo_videos(folder)


if __name__ == "__main__":
    raise SystemExit(main())
