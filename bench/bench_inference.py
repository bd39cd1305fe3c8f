"""Benchmark: questions/s of eval_video_llm.py's HF paths: batch size 1, batches within one video, and batched
``generate`` across videos.

Builds the tiny random Qwen3-VL (k9bench.tiny_model; ``--model PATH``: another checkpoint folder, e.g. the
4B-architecture one ``bench/bench_gpu.py`` writes) and a small synthetic question set (generated videos,
``--questions_per_video`` questions each), then runs the full script (main([...])) on the same questions, greedy,
in this one process, after a warm-up run:

* ``b1``: ``--batch_size 1`` (the reference's path: ``model.generate`` per question);
* ``today``: ``--batch_size 8``, batches within one video through ``model.generate`` (the backend's
  ``prepare_batch`` hidden for this run, so the runner takes its video-by-video path);
* ``batched``: ``--batch_size N`` (``--new_batch_size``, default 16; ``auto``: the free-memory rule): batches spanning
  videos, prepared ahead on worker threads, one batched ``generate`` each (the JSON's ``batches`` counts them).

The figure is the loop's questions/s (model loading excluded; frame decoding included), with one
torch thread by default (--threads) so that other load on a shared CPU skews it less. Prints how many answers
of each path equal batch size 1's (in float32 all of them; in bf16 a batch may change some: docs/inference.md)
and writes the figures as JSON with ``--json_out``. Exits 1 if the batched path's ratio to batch size 1 is below
--min_ratio (default 3), or (``--require_same``) an answer differs.

Usage::

    python bench/bench_inference.py
    python bench/bench_inference.py --videos 8 --questions_per_video 5 --max_frames 16 --new_batch_size 20 --repeats 1
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def make_dataset(folder: Path, videos: int, per_video: int, *, seconds: float = 12.0, size: str = "320x240",
                 distinct: int = 0) -> Path:
    """``videos`` generated clips (``distinct`` > 0: that many made, copied under the other names) and ``per_video``
    questions each; returns the jsonl path."""
    import shutil

    from k9bench.video.ffmpeg import make_video

    width, height = (int(x) for x in size.lower().split("x"))
    rows = []
    patterns = ["testsrc2", "mandelbrot", "life", "smpte"]
    for v in range(videos):
        scene = f"benchVid{v:03d}"
        if distinct and v >= distinct:
            shutil.copyfile(folder / f"benchVid{v % distinct:03d}.mp4", folder / f"{scene}.mp4")
        else:
            make_video(folder / f"{scene}.mp4", duration=seconds, fps=24, width=width, height=height, pattern=patterns[v % len(patterns)])
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


def run_once(common: list[str], out: Path, batch_size: int | str, *, across_videos: bool = True) -> dict:
    """One run of the script; ``across_videos=False``: batches within one video (the backend's ``prepare_batch`` hidden)."""
    import eval_video_llm
    from k9bench.inference.hf.backend import HFBackend

    saved = HFBackend.prepares_batches
    if not across_videos:
        HFBackend.prepares_batches = lambda self: False  # the runner then batches video by video
    try:
        code = eval_video_llm.main([*common, "--batch_size", str(batch_size), "--output_file", str(out)])
    finally:
        HFBackend.prepares_batches = saved
    if code != 0:
        raise SystemExit(f"eval_video_llm.py exited with {code} at batch size {batch_size}")
    return json.loads(out.read_text(encoding="utf-8"))


def build_parser():
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags

    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="checkpoint folder (default: the tiny random Qwen3-VL, built here)")
    parser.add_argument("--device", default="cpu", help="--device of the runs (default: cpu)")
    parser.add_argument("--dtype", default=None, help="--torch_dtype of the runs (default: the script's: float32 on CPU, bf16 on a GPU)")
    parser.add_argument("--videos", type=int, default=6, help="generated videos")
    parser.add_argument("--distinct_videos", type=int, default=0, help="videos actually generated, copied under the others' names (0: all)")
    parser.add_argument("--video_seconds", type=float, default=12.0)
    parser.add_argument("--video_size", default="320x240", help="clip WIDTHxHEIGHT")
    parser.add_argument("--questions_per_video", type=int, default=8, help="questions per video")
    parser.add_argument("--batch_size", type=int, default=8, help="today's batch size (batches within one video)")
    parser.add_argument("--new_batch_size", default="16", help="the batched path's --batch_size (batches spanning videos), or auto")
    parser.add_argument("--max_new_tokens", type=int, default=48, help="tokens generated per question")
    parser.add_argument("--max_frames", type=int, default=8, help="frames per video")
    parser.add_argument("--max_pixels", type=int, default=16384)
    parser.add_argument("--min_pixels", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per path (best kept)")
    parser.add_argument("--skip_b1", action="store_true", help="no batch-size-1 run (slow at full size); ratios against today's")
    parser.add_argument("--min_ratio", type=float, default=3.0, help="required questions/s ratio (batched / batch size 1, or today's)")
    parser.add_argument("--require_same", action="store_true", help="exit 1 when an answer differs from the baseline's")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: on a shared machine more threads mostly measure contention; 0: torch's)")
    parser.add_argument("--json_out", default=None, help="write the figures here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("K9BENCH_NO_PROGRESS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from k9bench.tiny_model import build_tiny_qwen3vl

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}, torch {torch.__version__}")

    with tempfile.TemporaryDirectory(prefix="k9bench-bench-") as tmp:
        tmp = Path(tmp)
        model = args.model or str(build_tiny_qwen3vl(tmp / "tiny"))
        dataset = make_dataset(tmp, args.videos, args.questions_per_video, seconds=args.video_seconds, size=args.video_size,
                               distinct=args.distinct_videos)
        common = [
            "--model_name_or_path", model, "--dataset_name", str(dataset), "--video_dir", str(tmp), "--device", args.device,
            "--max_frames", str(args.max_frames), "--max_pixels", str(args.max_pixels), "--min_pixels", str(args.min_pixels),
            "--max_new_tokens", str(args.max_new_tokens), "--greedy", "-q", *(["--torch_dtype", args.dtype] if args.dtype else []),
        ]
        n = args.videos * args.questions_per_video
        run_once(common, tmp / "warmup.json", args.new_batch_size)  # first calls pay one-off costs
        runs = {"b1": (1, False), "today": (args.batch_size, False), "batched": (args.new_batch_size, True)}
        if args.skip_b1:
            del runs["b1"]
        result: dict = {"questions": n, "device": args.device, "torch": torch.__version__}
        outputs: dict[str, dict] = {}
        for rep in range(args.repeats):
            for name, (bs, across) in runs.items():
                data = run_once(common, tmp / f"raw_{name}_r{rep}.json", bs, across_videos=across)
                stats = data["run_stats"]
                qps = n / stats["wall_seconds"]
                entry = result.setdefault(name, {"questions_per_second": 0.0})
                if qps > entry["questions_per_second"]:
                    entry.update(questions_per_second=round(qps, 3), batch_size=stats["batch_size"]["batch_size"],
                                 batches=(stats.get("prepare") or {}).get("prepared", 0), batch_fallbacks=stats["batch_fallbacks"])
                outputs[name] = {r["idx"]: r["response"] for r in data["individual_results"]}
                print(f"run {rep}: {name:7s} batch_size {stats['batch_size']['batch_size']:3d}: {n} questions in {stats['wall_seconds']:.2f}s"
                      f" = {qps:.2f} questions/s (generate {stats['generate_seconds']:.2f}s, waiting for frames/CPU "
                      f"{stats['frame_wait_seconds']:.2f}s, batches across videos {entry.get('batches', 0)})")
        base = "b1" if "b1" in runs else "today"
        for name in runs:
            result[name]["same_answers_as_" + base] = sum(outputs[name][k] == v for k, v in outputs[base].items())
        ratio = result["batched"]["questions_per_second"] / result[base]["questions_per_second"]
        result["ratio"] = round(ratio, 3)
        print("best: " + ", ".join(f"{name} {result[name]['questions_per_second']:.2f} q/s" for name in runs))
        print(f"ratio (batched / {base}): {ratio:.2f}x (required >= {args.min_ratio:.1f}x)")
        for name in runs:
            print(f"{name}: {result[name]['same_answers_as_' + base]}/{n} answers equal {base}'s")
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        same = all(result[name]["same_answers_as_" + base] == n for name in runs)
        if args.require_same and not same:
            print("FAIL: the runs' outputs differ")
            return 1
        if ratio < args.min_ratio:
            print("FAIL: ratio below the requirement")
            return 1
        print("OK")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
