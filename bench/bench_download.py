"""Benchmark: parallel downloads against one worker, on a local server with 1 s latency per request.

16 tiny generated videos are served by tests/video_server.py (1 s delay on every request, as
a slow remote would add) through the yt-dlp test plugin; yt-dlp is restricted to that
extractor, so nothing leaves 127.0.0.1. The same 16 videos are downloaded into two fresh
folders, first with ``--workers 1`` and then with ``--workers 4``; both wall times and
the ratio are printed. Exits 1 when the ratio is below ``--min_ratio`` (3.0) or any
download failed.

Usage::

    python bench/bench_download.py
    python bench/bench_download.py --videos 16 --latency 1.0 --workers 4 --min_ratio 3
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser
    from k9bench.download.stage import DownloadConfig
    from k9bench.settings import default_of
    from k9bench.validators import non_negative_float, positive_float, positive_int

    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--videos", type=positive_int, default=16, help="number of videos")
    parser.add_argument("--latency", type=non_negative_float, default=1.0, help="seconds of delay per HTTP request")
    parser.add_argument("--workers", type=positive_int, default=default_of(DownloadConfig, "workers"),
                        help="parallel workers of the fast run (default: the download's, %(default)s)")
    parser.add_argument("--min_ratio", type=positive_float, default=3.0, help="required speed-up of --workers over 1 worker")
    return parser


def run(videos: dict, folder: Path, workers: int, overrides: dict) -> tuple[float, dict]:
    from k9bench.download.stage import DownloadConfig, download_videos

    config = DownloadConfig(workers=workers, retries=0, timeout=30.0, progress=False, **overrides)
    start = time.perf_counter()
    report = download_videos(videos, folder, config)
    return time.perf_counter() - start, report.counts


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from k9bench.video.ffmpeg import make_video
    from tests.video_server import Fmt, VideoServer, install_test_extractor

    overrides = install_test_extractor()
    with tempfile.TemporaryDirectory(prefix="bench_download_") as tmp:
        tmp = Path(tmp)
        source = make_video(tmp / "source.mp4", duration=2.0, fps=15, width=160, height=120, faststart=False)
        with VideoServer(latency=args.latency) as server:
            os.environ["K9TEST_SERVER"] = server.base_url
            for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
                os.environ.pop(var, None)
            videos = {}
            for i in range(args.videos):
                scene = f"benchVid{i:03d}"
                server.add(scene, [Fmt("mp4-360", source, height=360, vcodec="avc1", acodec="mp4a")])
                videos[scene] = f"https://www.youtube.com/watch?v={scene}"
            serial, serial_counts = run(videos, tmp / "serial", 1, overrides)
            parallel, parallel_counts = run(videos, tmp / "parallel", args.workers, overrides)
    ratio = serial / parallel if parallel > 0 else float("inf")
    print(f"videos: {args.videos}, latency per request: {args.latency:g} s")
    print(f"--workers 1: {serial:.2f} s  {serial_counts}")
    print(f"--workers {args.workers}: {parallel:.2f} s  {parallel_counts}")
    print(f"speed-up: {ratio:.2f}x (required >= {args.min_ratio:g}x)")
    failed = serial_counts["failed"] + parallel_counts["failed"]
    if failed or serial_counts["ok"] != args.videos or parallel_counts["ok"] != args.videos:
        print(f"FAIL: not every video downloaded ({failed} failed)")
        return 1
    if ratio < args.min_ratio:
        print("FAIL: speed-up below the requirement")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
