"""Benchmark: questions/s of eval_video_llm.py at --batch_size 8 against --batch_size 1.

Builds the tiny random Qwen3-VL (k9bench.tiny_model) and a small synthetic question set (two
generated videos, eight questions each), then runs the full script (main([...])) on the same
questions with batch size 1 and 8, greedy, in this one process, after a warm-up run. The figure
is the loop's questions/s (model loading excluded; frame decoding included, prefetched), with one
torch thread by default (--threads) so that other load on a shared CPU skews it less. Under
greedy decoding the two runs must also give the same responses. Exits 1 if the ratio is below
--min_ratio (default 3).

Usage::

    python bench/bench_inference.py
    python bench/bench_inference.py --questions_per_video 8 --max_new_tokens 48 --min_ratio 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def make_dataset(folder: Path, videos: int, per_video: int) -> Path:
    """``videos`` generated clips and ``per_video`` questions each; returns the jsonl path."""
    from k9bench.ffmpeg import make_video

    rows = []
    patterns = ["testsrc2", "mandelbrot", "life", "smptebars"]
    for v in range(videos):
        scene = f"benchVid{v:03d}"
        make_video(folder / f"{scene}.mp4", duration=6.0, fps=24, width=320, height=240, pattern=patterns[v % len(patterns)])
        for q in range(per_video):
            rows.append({
                "idx": len(rows), "video_url": f"https://youtu.be/{scene}", "scene_name": scene,
                "question_category": "action sequence",
                "question": f"Benchmark question {q} about clip {v}: what moves first, and where does it go{'?' * (1 + q % 3)}",
                "options": {k: f"option {k}" for k in "ABCDE"}, "correct_answer": "A",
            })
    path = folder / "bench.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def run_once(common: list[str], out: Path, batch_size: int) -> dict:
    import eval_video_llm

    code = eval_video_llm.main([*common, "--batch_size", str(batch_size), "--output_file", str(out)])
    if code != 0:
        raise SystemExit(f"eval_video_llm.py exited with {code} at batch size {batch_size}")
    return json.loads(out.read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--videos", type=int, default=2, help="generated videos")
    parser.add_argument("--questions_per_video", type=int, default=8, help="questions per video")
    parser.add_argument("--batch_size", type=int, default=8, help="batched run's batch size")
    parser.add_argument("--max_new_tokens", type=int, default=48, help="tokens generated per question")
    parser.add_argument("--max_frames", type=int, default=4, help="frames per video")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per batch size (best kept)")
    parser.add_argument("--min_ratio", type=float, default=3.0, help="required questions/s ratio (batched / batch size 1)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: on a shared machine more threads mostly measure contention)")
    args = parser.parse_args(argv)

    os.environ.setdefault("K9BENCH_NO_PROGRESS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from k9bench.tiny_model import build_tiny_qwen3vl

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}")

    with tempfile.TemporaryDirectory(prefix="k9bench-bench-") as tmp:
        tmp = Path(tmp)
        model = build_tiny_qwen3vl(tmp / "tiny")
        dataset = make_dataset(tmp, args.videos, args.questions_per_video)
        common = [
            "--model_name_or_path", str(model), "--dataset_name", str(dataset), "--video_dir", str(tmp),
            "--max_frames", str(args.max_frames), "--max_pixels", "16384", "--min_pixels", "2048",
            "--max_new_tokens", str(args.max_new_tokens), "--greedy", "-q",
        ]
        n = args.videos * args.questions_per_video
        run_once(common, tmp / "warmup.json", args.batch_size)  # first calls pay one-off costs
        best: dict[int, float] = {}
        outputs: dict[int, dict] = {}
        for rep in range(args.repeats):
            for bs in (1, args.batch_size):
                data = run_once(common, tmp / f"raw_b{bs}_r{rep}.json", bs)
                stats = data["run_stats"]
                qps = n / stats["wall_seconds"]
                best[bs] = max(best.get(bs, 0.0), qps)
                outputs[bs] = {r["idx"]: r["response"] for r in data["individual_results"]}
                print(f"run {rep}: batch_size {bs:2d}: {n} questions in {stats['wall_seconds']:.2f}s = {qps:.2f} questions/s "
                      f"(generate {stats['generate_seconds']:.2f}s, waiting for frames {stats['frame_wait_seconds']:.2f}s)")
        same = outputs[1] == outputs[args.batch_size]
        ratio = best[args.batch_size] / best[1]
        print(f"best: batch_size 1 {best[1]:.2f} q/s, batch_size {args.batch_size} {best[args.batch_size]:.2f} q/s")
        print(f"ratio (batch_size {args.batch_size} / batch_size 1): {ratio:.2f}x (required >= {args.min_ratio:.1f}x)")
        print(f"greedy outputs identical across batch sizes: {same}")
        if not same:
            print("FAIL: batched outputs differ from batch-size-1 outputs")
            return 1
        if ratio < args.min_ratio:
            print("FAIL: ratio below the requirement")
            return 1
        print("OK")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
