"""Benchmark: frames per question, the reference's way against ours.

The reference asks qwen-vl-utils for the video twice for every question, so a video shared by five
questions is decoded ten times. Our path decodes it once (``FrameCache``) and releases it after its
last question. Both run in the same process on the same generated videos (six 3-minute 720p clips,
five questions each by default), interleaved video by video so that load from other processes
hits both alike. The script prints both times and the ratio, checks that both paths give the same
frames, and exits 1 when the ratio is below ``--min_ratio`` (default 8).

The videos are generated once (ffmpeg, ultrafast x264) and kept in ``--video_cache``.

Usage::

    python bench/bench_video.py                        # 6 videos x 5 questions, needs >= 8x
    python bench/bench_video.py --videos 2 --duration 60 --min_ratio 0   # a quick look
    python bench/bench_video.py --decoder pyav
    python bench/bench_video.py --audio --videos 2 --duration 60 --min_ratio 0   # soundtrack read time too

With ``--audio`` the clips carry a sine soundtrack and the script also times reading each one once
at 16 kHz (``FrameCache.get_audio``: ffmpeg, mono float32), then again from a disk store.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# fps of the generated clips, cycled over the videos (integer and NTSC rates)
FPS_CYCLE = ["30", "25", "24", "30000/1001", "60", "50"]


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags
    p = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--videos", type=int, default=6, help="number of videos (default: %(default)s)")
    p.add_argument("--questions", type=int, default=5, help="questions per video (default: %(default)s)")
    p.add_argument("--duration", type=float, default=180.0, help="video length in seconds (default: %(default)s)")
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=720)
    p.add_argument("--calls_per_question", type=int, default=2, help="qwen-vl-utils calls per question in the reference pattern")
    p.add_argument("--decoder", default=None, help="our decoder (default: k9bench.video.sampling.DEFAULT_DECODER)")
    p.add_argument("--max_frames", type=int, default=32)
    p.add_argument("--video_cache", default=os.path.join(tempfile.gettempdir(), "k9bench_bench_video"),
                   help="where the generated videos are kept between runs (default: %(default)s)")
    p.add_argument("--min_ratio", type=float, default=8.0, help="required speed-up (default: %(default)s)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    p.add_argument("--disk_cache", action="store_true",
                   help="also time the on-disk frame cache: a first run writing it, a second run reading it")
    p.add_argument("--audio", action="store_true",
                   help="clips with a soundtrack; also time reading each soundtrack once (16 kHz) and from a disk store")
    return p


def make_videos(args) -> list[Path]:
    from k9bench.video.ffmpeg import make_video

    folder = Path(args.video_cache)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(args.videos):
        fps = FPS_CYCLE[i % len(FPS_CYCLE)]
        name = f"bench_{i}_{args.width}x{args.height}_{int(args.duration)}s_{fps.replace('/', '-')}fps{'_sine' if args.audio else ''}.mp4"
        path = folder / name
        if not path.exists():
            t0 = time.perf_counter()
            make_video(path, duration=args.duration, fps=fps, width=args.width, height=args.height, pattern="testsrc2",
                       audio="sine" if args.audio else False)
            print(f"generated {path} in {time.perf_counter() - t0:.1f}s", flush=True)
        paths.append(path)
    return paths


def read_through(path: Path) -> None:
    """Read a file once so it sits in the page cache."""
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


def reference_frames(path: Path, max_frames: int):
    """One reference-style call: process_vision_info on a chat holding the video item."""
    from qwen_vl_utils import process_vision_info

    messages = [{"role": "user", "content": [
        {"type": "video", "video": str(path), "fps": 1.0, "max_frames": max_frames, "max_pixels": 360 * 420},
        {"type": "text", "text": "What is the dog doing?"},
    ]}]
    _, videos, _ = process_vision_info(messages, return_video_kwargs=True, return_video_metadata=True)
    return videos[0]


def time_disk_cache(paths: list[Path], decoder: str, max_frames: int) -> dict:
    """Seconds for a run that fills a fresh on-disk frame cache, then for one that reads it."""
    from k9bench.video.cache import FrameCache

    with tempfile.TemporaryDirectory(prefix="k9bench_frames_") as tmp:
        t0 = time.perf_counter()
        with FrameCache(decoder=decoder, max_frames=max_frames, disk_dir=tmp) as first:
            for path in paths:
                first.get(path)
                first.release(path)
        t_write = time.perf_counter() - t0
        t0 = time.perf_counter()
        with FrameCache(decoder=decoder, max_frames=max_frames, disk_dir=tmp) as second:
            for path in paths:
                second.get(path)
                second.release(path)
            hits = second.stats.disk_hits
        t_read = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in Path(tmp).iterdir()) / max(len(paths), 1)
    return {"write_run_s": round(t_write, 3), "read_run_s": round(t_read, 3), "disk_hits": hits, "bytes_per_video": size}


def time_audio(paths: list[Path], sampling_rate: int = 16000) -> dict:
    """Seconds to read each soundtrack once (ffmpeg), then to read them all back from a disk store."""
    from k9bench.video.cache import FrameCache

    with tempfile.TemporaryDirectory(prefix="k9bench_audio_") as tmp:
        per_video = []
        with FrameCache(disk_dir=tmp) as first:
            for path in paths:
                t0 = time.perf_counter()
                audio = first.get_audio(path, sampling_rate)
                per_video.append({"video": path.name, "read_s": round(time.perf_counter() - t0, 3),
                                  "seconds_of_audio": round(audio.duration, 3)})
        t0 = time.perf_counter()
        with FrameCache(disk_dir=tmp) as second:
            for path in paths:
                second.get_audio(path, sampling_rate)
            hits = second.stats.audio_disk_hits
        t_disk = time.perf_counter() - t0
    total = sum(r["read_s"] for r in per_video)
    return {"sampling_rate": sampling_rate, "read_total_s": round(total, 3), "read_per_video_s": round(total / max(len(paths), 1), 3),
            "disk_read_total_s": round(t_disk, 3), "disk_hits": hits, "per_video": per_video}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch
    from qwen_vl_utils import vision_process

    from k9bench.video.cache import FrameCache
    from k9bench.video.sampling import DEFAULT_DECODER

    decoder = args.decoder or DEFAULT_DECODER
    backend = vision_process.get_video_reader_backend()
    paths = make_videos(args)
    cache = FrameCache(decoder=decoder, max_frames=args.max_frames)

    # untimed warm-up: imports and first-call costs of both paths, on a small clip
    from k9bench.video.ffmpeg import make_video
    from k9bench.video.sampling import sample

    warm = Path(args.video_cache) / "warmup_320x240_4s.mp4"
    if not warm.exists():
        make_video(warm, duration=4, fps=24, width=320, height=240)
    reference_frames(warm, args.max_frames)
    sample(warm, decoder=decoder, max_frames=args.max_frames)

    ref_total = ours_total = 0.0
    rows = []
    for path in paths:
        read_through(path)  # both paths then start from a warm page cache
        t0 = time.perf_counter()
        ref = None
        for _q in range(args.questions):
            for _c in range(args.calls_per_question):
                ref = reference_frames(path, args.max_frames)
        t_ref = time.perf_counter() - t0

        t0 = time.perf_counter()
        for _q in range(args.questions):
            ours = cache.get(path)
        t_ours = time.perf_counter() - t0
        cache.release(path)

        ref_video, ref_meta = ref
        same_idx = list(ref_meta["frames_indices"]) == ours.indices
        mad = float((ours.frames.float() - ref_video).abs().mean()) if ours.frames.shape == ref_video.shape else float("nan")
        ref_total += t_ref
        ours_total += t_ours
        rows.append({"video": path.name, "reference_s": round(t_ref, 3), "ours_s": round(t_ours, 3),
                     "frames": ours.num_frames, "size": [ours.height, ours.width], "same_indices": same_idx,
                     "mean_abs_diff": mad})
        print(f"{path.name}: reference {t_ref:7.2f}s  ours {t_ours:6.2f}s  frames {ours.num_frames} "
              f"{ours.width}x{ours.height}  same indices {same_idx}  MAD {mad:.4f}", flush=True)

    disk = time_disk_cache(paths, decoder, args.max_frames) if args.disk_cache else None
    audio = time_audio(paths) if args.audio else None

    ratio = ref_total / max(ours_total, 1e-9)
    figures = {
        "videos": len(paths), "questions_per_video": args.questions, "calls_per_question": args.calls_per_question,
        "duration_s": args.duration, "size": f"{args.width}x{args.height}", "reference_backend": backend,
        "our_decoder": decoder, "reference_total_s": round(ref_total, 3), "ours_total_s": round(ours_total, 3),
        "ratio": round(ratio, 2), "min_ratio": args.min_ratio, "cpu_count": os.cpu_count(),
        "loadavg_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "torch_threads": torch.get_num_threads(), "stats": cache.summary()["stats"], "per_video": rows,
        "disk_cache": disk, "audio": audio,
    }
    print(f"reference pattern ({args.calls_per_question} qwen-vl-utils calls/question, backend {backend}): {ref_total:.2f}s")
    print(f"ours (one {decoder} decode per video, cached):  {ours_total:.2f}s")
    print(f"ratio: {ratio:.2f}x (required >= {args.min_ratio}x)")
    if disk is not None:
        print(f"disk frame cache: first run (decode + write) {disk['write_run_s']:.2f}s, "
              f"second run (read + verify) {disk['read_run_s']:.2f}s, {disk['bytes_per_video'] / 1e6:.1f} MB per video")
    if audio is not None:
        print(f"soundtracks at {audio['sampling_rate']} Hz: {audio['read_per_video_s']:.2f}s per video with ffmpeg "
              f"(frames: {ours_total / max(len(paths), 1):.2f}s per video), all {len(paths)} back from disk in {audio['disk_read_total_s']:.2f}s")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    ok_frames = all(r["same_indices"] and r["mean_abs_diff"] <= 1.0 for r in rows)
    if not ok_frames:
        print("FAIL: our frames differ from the reference's", file=sys.stderr)
        return 1
    if ratio < args.min_ratio:
        print(f"FAIL: ratio {ratio:.2f} < {args.min_ratio}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
