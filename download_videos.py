"""Download the K9-Bench videos: each once, verified, in parallel, with every failure explained.

Every distinct video of the selected questions is fetched with yt-dlp (an mp4 of at most
720p preferred), remuxed by ffmpeg into a faststart mp4 (stream copy), verified, and saved
as ``{scene}.mp4``. Files already present and verified are skipped, so a rerun resumes.
A manifest (JSON) lists every video as ok / skipped / failed with the failure class.
The demo set's videos (``--dataset_name demo``) are made locally, never downloaded.

Examples::

    python download_videos.py                                   # all videos of ogmen/K9Bench (test)
    python download_videos.py --max_samples 10 --output_dir ./k9bench_videos
    python download_videos.py --workers 8 --cookies cookies.txt # YouTube bot checks: pass cookies
    python download_videos.py --cookies_from_browser firefox --sleep_interval 2
    python download_videos.py --dataset_name demo --output_dir demo_videos   # generated locally

Exit status: 0 every video present and verified; 1 some failed (after trying all of them);
2 bad input (a flag value, dataset, URL, scene id, output folder, manifest, ffmpeg, cookies),
refused before any video is generated or downloaded, or another download writing the same
manifest; 75 stopped by a signal (SIGTERM, SIGUSR1, Ctrl-C): finished videos are kept, rerun
to resume.
"""

from __future__ import annotations

import argparse
import logging


def build_parser() -> argparse.ArgumentParser:
    from k9bench.download.stage import build_parser as package_parser

    return package_parser()


def main(argv: list[str] | None = None) -> int:
    import sys

    from k9bench.logs import setup_logging
    from k9bench.download import stage as kd
    from k9bench.stage import StageError, run_stage

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose, args.quiet)
    try:
        config = kd.config_from_argv(argv)
    except StageError as exc:
        logging.getLogger("download_videos").error("%s", exc)
        return exc.exit_code
    return run_stage(kd.DownloadStage(config))


if __name__ == "__main__":
    raise SystemExit(main())
