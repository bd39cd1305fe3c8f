"""Benchmark: host memory of building ``--backend vllm``'s prompts for a full K9-Bench run, without a model.

4,744 questions over 907 videos (5 or 6 questions each, as K9-Bench), 32 frames per video sampled from 360x420
sources (qwen-vl-utils' resize at Qwen3-VL's patch 16: 352x416 frames). No video is decoded: each video's frames
are a synthetic uint8 tensor made when its first chunk is prepared, as the frame cache would decode it, and
dropped after its last chunk is answered, as the runner releases it. The prompts are built by the backend's own
code (:func:`k9bench.inference.vllm.prompts.build_prompts`) in chunks of ``--batch_size auto``'s size
(:func:`~k9bench.inference.vllm.prompts.chunk_size`, for ``--max_num_seqs``, default an H200's 1,024), with
``--depth`` chunks prepared ahead of the one answering (the runner's default: 2).

Printed: the chunk size and its reason, the peak resident memory above the start (``ru_maxrss``) and the bound
(the frames of ``depth + 1`` chunks, each about ``CHUNK_FRAME_BYTES``, plus :data:`HOST_SLACK`); then the baseline in the same process:
the bytes the prompts add beyond the frames, one array per video (views: 0) against the old one copy per question,
on one chunk (the old way at full scale would need tens of GB, so it is counted on ``--baseline_questions``).
Exits 1 when the peak is above the bound.

Usage::

    python bench/bench_vllm_prompts.py
    python bench/bench_vllm_prompts.py --max_num_seqs 256 --depth 3 --json_out /tmp/prompts.json
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

QUESTIONS, VIDEOS = 4744, 907
"""K9-Bench: questions and videos."""
FRAMES, HEIGHT, WIDTH = 32, 352, 416
"""32 frames of a 360x420 source at max_pixels 360*420, patch 16 (352x416)."""
HOST_SLACK = 1 / 3
"""The bound's allowance above ``depth + 1`` chunks of :data:`CHUNK_FRAME_BYTES` (4 GiB in all at depth 2): a chunk
is sized by the average questions per video, so a chunk of videos with fewer questions holds more videos (K9-Bench:
5 or 6 a video, up to ~10% more), and glibc keeps freed frame buffers for reuse (its mmap threshold rises to a frame
tensor's size after the first is freed; docs/measurements.md has the figures)."""


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags

    p = ArgumentParser(prog="bench_vllm_prompts.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--max_num_seqs", type=int, default=1024, help="the engine's running sequences (default: %(default)s, an H200's)")
    p.add_argument("--depth", type=int, default=2, help="chunks prepared ahead of the one answering (default: %(default)s)")
    p.add_argument("--baseline_questions", type=int, default=48, help="questions the old copy-per-question way is counted on")
    p.add_argument("--json_out", default=None)
    return p


def _rss() -> int:
    """Peak resident set of this process so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _layout() -> list[int]:
    """Questions per video: 5 each, one more for the first ``QUESTIONS - 5 * VIDEOS`` videos."""
    extra = QUESTIONS - 5 * VIDEOS
    return [6 if v < extra else 5 for v in range(VIDEOS)]


def _frames(video: int):
    import torch

    from k9bench.video.sampling import Frames

    pixels = torch.full((FRAMES, 3, HEIGHT, WIDTH), video % 251, dtype=torch.uint8)
    return Frames(frames=pixels, indices=list(range(0, 4 * FRAMES, 4)), source_fps=30.0, total_frames=4 * FRAMES, sample_fps=7.5,
                  height=HEIGHT, width=WIDTH, duration=4 * FRAMES / 30.0, decoder="synthetic")


def _policy():
    from k9bench.video.policy import FramePolicy

    return FramePolicy(rule="qwen_vl_rules", processor_class="Qwen3VLProcessor", video_processor_class="Qwen3VLVideoProcessor",
                       image_patch_size=16, frame_size=None, resize_in_processor=False, video_metadata=True, fps_keyword=False,
                       recommended_max_frames=None, audio_sampling_rate=None, audio_window_seconds=None, audio_in_video=False,
                       family="qwen3_vl")


def _request(i: int, frames):
    from k9bench.inference.backend import GenerationRequest

    return GenerationRequest(key=i, messages=[{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": f"question {i}"}]}],
                             frames=frames, seed=i)


def _render(messages: list[dict]) -> str:
    return "<|vision_start|><|video_pad|><|vision_end|>" + messages[0]["content"][1]["text"]


def _added_bytes(prompts: list[dict], frames_list: list) -> int:
    """Bytes of the prompts' video arrays that are not views of the sampled frames (each array counted once)."""
    import numpy as np

    seen, total = set(), 0
    for p in prompts:
        array = p["multi_modal_data"]["video"][0][0]
        if id(array) in seen:
            continue
        seen.add(id(array))
        if not any(np.shares_memory(array, f.frames.numpy()) for f in frames_list):
            total += array.nbytes
    return total


def full_run(args: argparse.Namespace) -> dict:
    """Every chunk of the run built, ``depth + 1`` held at once; the peak RSS and the bound."""
    from k9bench.inference.vllm.prompts import CHUNK_FRAME_BYTES, build_prompts, chunk_size, frame_bytes_bound

    per_video = frame_bytes_bound(FRAMES, HEIGHT * WIDTH)
    size, reason = chunk_size(args.max_num_seqs, QUESTIONS, videos=VIDEOS, frame_bytes=per_video)
    questions = [(v, q) for v, n in enumerate(_layout()) for q in range(n)]
    last_chunk = {v: i // size for i, (v, _) in enumerate(questions)}
    _frames(0), _request(0, None)  # torch and the request types imported before the start is measured
    policy, live, held = _policy(), {}, deque()
    start_rss, t0, chunks, most_videos = _rss(), time.perf_counter(), 0, 0
    for first in range(0, len(questions), size):
        chunk = first // size
        part = questions[first:first + size]
        for v, _ in part:
            if v not in live:
                live[v] = _frames(v)
        prepared = build_prompts([_request(v * 10 + q, live[v]) for v, q in part], _render, policy)
        held.append((chunk, prepared))
        most_videos = max(most_videos, len(live))
        if len(held) > args.depth:  # the oldest chunk is answered: its prompts go, and its videos whose last chunk it was
            answered, _ = held.popleft()
            for v in [v for v, c in last_chunk.items() if c == answered and v in live]:
                del live[v]
        chunks += 1
    seconds = time.perf_counter() - t0
    peak = _rss() - start_rss
    bound = int((args.depth + 1) * CHUNK_FRAME_BYTES * (1 + HOST_SLACK))
    return {"questions": QUESTIONS, "videos": VIDEOS, "frames": [FRAMES, HEIGHT, WIDTH], "frame_bytes_per_video": per_video,
            "max_num_seqs": args.max_num_seqs, "chunk_size": size, "chunk_reason": reason, "chunks": chunks, "depth": args.depth,
            "most_videos_held": most_videos, "build_seconds": round(seconds, 2), "peak_rss_above_start_bytes": peak,
            "bound_bytes": bound, "start_rss_bytes": start_rss}


def baseline(args: argparse.Namespace) -> dict:
    """One chunk of ``--baseline_questions``: the bytes the prompts add, one array per video against one copy per question."""
    from k9bench.inference.vllm.prompts import build_prompts

    layout = _layout()
    questions, v = [], 0
    while len(questions) < args.baseline_questions:
        questions += [(v, q) for q in range(layout[v])]
        v += 1
    questions = questions[:args.baseline_questions]
    frames = {v: _frames(v) for v, _ in questions}
    requests = [_request(v * 10 + q, frames[v]) for v, q in questions]
    new = build_prompts(requests, _render, _policy())
    old = [{"multi_modal_data": {"video": [(r.frames.frames.permute(0, 2, 3, 1).contiguous().numpy(), {})]}} for r in requests]
    new_bytes, old_bytes = _added_bytes(new.prompts, list(frames.values())), _added_bytes(old, list(frames.values()))
    return {"questions": len(requests), "videos": len(frames), "arrays_new": new.videos, "arrays_old": len(old),
            "added_bytes_new": new_bytes, "added_bytes_old": old_bytes}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    gib = 2 ** 30
    run = full_run(args)
    print(f"chunk: {run['chunk_size']} questions ({run['chunk_reason']}); {run['chunks']} chunks, {args.depth} prepared ahead")
    print(f"4,744 questions x {FRAMES} frames of {HEIGHT}x{WIDTH}: peak RSS above start {run['peak_rss_above_start_bytes'] / gib:.2f} GiB "
          f"(start {run['start_rss_bytes'] / gib:.2f} GiB: python, torch), "
          f"bound {run['bound_bytes'] / gib:.2f} GiB ({run['most_videos_held']} videos held at most; built in {run['build_seconds']} s)")
    base = baseline(args)
    ratio = base["added_bytes_old"] / max(1, base["added_bytes_new"])
    print(f"baseline, one chunk of {base['questions']} questions over {base['videos']} videos: prompts add "
          f"{base['added_bytes_new'] / 2**20:.1f} MiB ({base['arrays_new']} arrays, views) vs {base['added_bytes_old'] / 2**20:.1f} MiB "
          f"({base['arrays_old']} copies, one per question); old/new {'inf' if not base['added_bytes_new'] else f'{ratio:.1f}x'}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"run": run, "baseline": base}, indent=2))
    ok = run["peak_rss_above_start_bytes"] <= run["bound_bytes"]
    if not ok:
        print("FAIL: the peak is above the bound", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
