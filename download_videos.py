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
2 bad input (dataset, URL, scene id, output folder, ffmpeg, cookies); 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys

from k9bench.cli import add_dataset_args, add_logging_args, setup_logging

log = logging.getLogger("download_videos")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Download K9-Bench videos with yt-dlp, remux to faststart mp4, verify each file.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_dataset_args(parser)
    parser.add_argument("--output_dir", default="./k9bench_videos", help="folder for the {scene}.mp4 files")
    parser.add_argument("--max_samples", type=int, default=-1, help="only the videos of the first N questions (-1: all)")
    parser.add_argument("--workers", type=int, default=4, help="videos downloaded in parallel")
    parser.add_argument("--retries", type=int, default=3, help="retries per request/fragment inside yt-dlp (with backoff)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds without data before a connection counts as stalled")
    parser.add_argument("--cookies", default=None, help="Netscape cookies.txt for YouTube (never modified)")
    parser.add_argument(
        "--cookies_from_browser",
        default=None,
        metavar="BROWSER[+KEYRING][:PROFILE][::CONTAINER]",
        help="read YouTube cookies from a browser (e.g. firefox, chrome)",
    )
    parser.add_argument("--sleep_interval", type=float, default=0.0, help="seconds each worker waits before each download")
    parser.add_argument("--manifest", default=None, help="manifest JSON path (default: <output_dir>/download_manifest.json)")
    parser.add_argument(
        "--reverify",
        action="store_true",
        help="verify every existing file again, even those an earlier manifest recorded as verified and unchanged",
    )
    add_logging_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose, args.quiet)

    from k9bench.artifacts import provenance
    from k9bench.dataset import DEMO_NAME, DatasetError, load_questions, select_range, unique_videos
    from k9bench.download import DownloadConfig, DownloadInputError, download_videos

    try:
        loaded = load_questions(args.dataset_name, args.split, drop_invalid=args.drop_invalid_rows)
    except DatasetError as exc:
        log.error("%s", exc)
        return 2
    questions = select_range(loaded.questions, 0, None, args.max_samples)
    videos = unique_videos(questions)
    log.info("%d question(s) use %d distinct video(s)", len(questions), len(videos))
    config = DownloadConfig(
        workers=args.workers,
        retries=args.retries,
        timeout=args.timeout,
        cookies=args.cookies,
        cookies_from_browser=args.cookies_from_browser,
        sleep_interval=args.sleep_interval,
        manifest_path=args.manifest,
        reverify=args.reverify,
    )
    argv_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if args.dataset_name == DEMO_NAME:
            _generate_demo_videos(args.output_dir, videos, config)
        report = download_videos(videos, args.output_dir, config, provenance=provenance("download_videos.py", argv_list, args))
    except DownloadInputError as exc:
        log.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        log.error("interrupted; finished videos are kept and a rerun resumes")
        return 130
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
    return report.exit_code


def _generate_demo_videos(output_dir: str, videos: dict, config) -> None:
    """The demo set has no online videos: generate the missing ones locally (then they verify and skip)."""
    from pathlib import Path

    from k9bench.demo import DEMO_VIDEOS, make_demo_videos
    from k9bench.download import check_writable_target, DownloadInputError

    folder = Path(output_dir).expanduser().absolute()
    missing = [s for s in videos if s in DEMO_VIDEOS and not (folder / f"{s}.mp4").exists()]
    if not missing:
        return
    problem = check_writable_target(folder, "output folder")
    if problem:
        raise DownloadInputError(problem)
    log.info("generating %d demo video(s) locally (the demo set has no online videos)", len(missing))
    make_demo_videos(folder)


if __name__ == "__main__":
    raise SystemExit(main())
