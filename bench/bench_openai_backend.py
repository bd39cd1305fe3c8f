"""Benchmark: eval_video_llm.py --backend openai with --concurrency 16 against --concurrency 1, same process.

A local OpenAI-compatible server (tests/fake_openai_server.py) answers every chat request after
a fixed latency (300 ms by default). The same 100 questions (``--questions_per_video`` of them
per generated video; each request carries the video's 32 sampled frames as JPEG parts) run
twice through ``eval_video_llm.main``: once with ``--concurrency 1`` and once with
``--concurrency 16``. The script prints both wall times, the questions per second and their
ratio, and exits non-zero when the ratio is below the required speed-up (10x).

What is timed is the API side: an untimed warm-up run (same flags, a server without latency)
pays the one-time imports and decodes every video into a ``--frame_cache_dir`` that both timed
runs read, so video decoding (one CPU-bound thread, measured by bench/bench_video.py) does not
hide the request concurrency::

    python bench/bench_openai_backend.py
    python bench/bench_openai_backend.py --questions 200 --latency 0.5 --concurrency 32 --required 20
    python bench/bench_openai_backend.py --questions_per_video 1     # one question per video
    python bench/bench_openai_backend.py --video_transport video     # each video once as an mp4 (a "vLLM" server)

``--video_transport video`` makes the server say it is vLLM and sends each video's frames as one
mp4 (encoded once per video, as the questions of a video share it); ``frames`` (default) as JPEG parts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser
    from k9bench.inference.settings import FrameSettings
    from k9bench.settings import default_of
    from k9bench.validators import int_at_least, non_negative_float, positive_float, positive_int

    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=positive_int, default=100, help="questions to answer")
    p.add_argument("--questions_per_video", type=positive_int, default=5, help="questions sharing each video (K9-Bench: about 5.2)")
    p.add_argument("--latency", type=non_negative_float, default=0.3, help="seconds the server takes per request")
    p.add_argument("--concurrency", type=positive_int, default=16, help="requests in flight for the concurrent run")
    p.add_argument("--max_frames", type=int_at_least(2), default=default_of(FrameSettings, "max_frames"),
                   help="frames per video (sent as JPEG parts; default: eval_video_llm.py's)")
    p.add_argument("--max_pixels", type=positive_int, default=224 * 224, help="pixels per frame (the sampler's --max_pixels)")
    p.add_argument("--video_transport", choices=("frames", "video"), default="frames",
                   help="how the frames travel (video: one mp4 per video, to a server that says it is vLLM)")
    p.add_argument("--required", type=positive_float, default=10.0, help="minimum speed-up (baseline time / concurrent time)")
    return p


def scene_name(v: int) -> str:
    return f"benchVid{v:03d}"  # 11 characters, like a YouTube id


def make_data(folder: Path, questions: int, per_video: int) -> tuple[Path, Path]:
    """Generated videos (2 s, 160x120) and a jsonl dataset of ``questions`` rows."""
    from k9bench.video.ffmpeg import make_video

    video_dir = folder / "videos"
    n_videos = -(-questions // per_video)
    for v in range(n_videos):
        make_video(video_dir / f"{scene_name(v)}.mp4", duration=2.0, fps=16, width=160, height=120)
    rows = []
    for i in range(questions):
        scene = scene_name(i // per_video)
        rows.append({
            "idx": i, "video_url": f"https://youtu.be/{scene}", "scene_name": scene, "question_category": "action sequence",
            "question": f"Question {i}: what does the dog do next?", "options": {k: f"option {k}" for k in "ABCDE"},
            "correct_answer": "A",
        })
    dataset = folder / "bench.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return dataset, video_dir


def reply(request) -> str:
    import re

    i = int(re.search(r"Question (\d+):", request.text).group(1))
    return json.dumps({"reasoning": "the dog looks at the ball", "answer": f"it fetches the ball ({i})"})


def timed_run(server, dataset: Path, video_dir: Path, out: Path, concurrency: int, args: argparse.Namespace, cache_dir: Path) -> float:
    import eval_video_llm

    argv = [
        "--backend", "openai", "--api_model", "bench-model", "--base_url", server.base_url,
        "--dataset_name", str(dataset), "--video_dir", str(video_dir), "--output_file", str(out),
        "--max_frames", str(args.max_frames), "--fps", "16", "--max_pixels", str(args.max_pixels),
        "--min_pixels", str(min(args.max_pixels, 128 * 28 * 28) // 2), "--frame_cache_dir", str(cache_dir),
        "--concurrency", str(concurrency), "--video_transport", args.video_transport, "-q",
    ]
    t0 = time.perf_counter()
    code = eval_video_llm.main(argv)
    elapsed = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"eval_video_llm exited {code} (concurrency {concurrency})")
    data = json.loads(out.read_text(encoding="utf-8"))
    if data["failed_count"]:
        raise SystemExit(f"{data['failed_count']} failed record(s) with concurrency {concurrency}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("K9BENCH_NO_PROGRESS", "1")
    os.environ.pop("OPENAI_API_KEY", None)  # the local server needs none
    from tests.fake_openai_server import FakeOpenAIServer

    with tempfile.TemporaryDirectory(prefix="bench_openai_") as tmp:
        folder = Path(tmp)
        cache_dir = folder / "frame_cache"
        dataset, video_dir = make_data(folder, args.questions, args.questions_per_video)
        engine = "vllm" if args.video_transport == "video" else None
        with FakeOpenAIServer(reply, model="bench-model", engine=engine) as warm:
            timed_run(warm, dataset, video_dir, folder / "warmup.json", args.concurrency, args, cache_dir)
        with FakeOpenAIServer(reply, latency=args.latency, model="bench-model", engine=engine) as server:
            base = timed_run(server, dataset, video_dir, folder / "c1.json", 1, args, cache_dir)
            sent_base = len(server.chat_requests())
            server.clear()
            fast = timed_run(server, dataset, video_dir, folder / "cN.json", args.concurrency, args, cache_dir)
            sent_fast = len(server.chat_requests())
    ratio = base / fast
    sent_as = "as JPEG parts" if args.video_transport == "frames" else "as one mp4 per video"
    print(f"{args.questions} questions ({args.questions_per_video} per video, up to {args.max_frames} frames of "
          f"<= {args.max_pixels} pixels each {sent_as}), server latency {args.latency * 1000:.0f} ms")
    print(f"--concurrency 1:  {base:7.2f} s  {args.questions / base:6.2f} questions/s  ({sent_base} requests)")
    print(f"--concurrency {args.concurrency}: {fast:7.2f} s  {args.questions / fast:6.2f} questions/s  ({sent_fast} requests)")
    print(f"speed-up: {ratio:.2f}x (required >= {args.required:g}x)")
    if ratio < args.required:
        print("FAIL: speed-up below the required ratio", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
