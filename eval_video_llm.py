"""Run a video LLM on K9-Bench questions and write the raw JSON (SPEC section 2).

Usage::

    # the reference run: Qwen3-VL-4B-Instruct, 32 frames at 1 fps, first 10 questions
    python eval_video_llm.py --model_name_or_path Qwen/Qwen3-VL-4B-Instruct --video_dir k9bench_videos \\
        --max_frames 32 --max_samples 10

    # all questions, batched, fetching missing videos first; rerun the same line to resume
    python eval_video_llm.py --model_name_or_path Qwen/Qwen3-VL-8B-Instruct --max_samples -1 \\
        --batch_size 8 --auto_download --output_file eval_results/raw_Qwen3-VL-8B-Instruct_mf32_n-1.json

    # a Thinking model; text-only baseline (no video); shard 2 of a 4-task SLURM array
    python eval_video_llm.py --model_name_or_path Qwen/Qwen3-VL-4B-Thinking --thinking_mode
    python eval_video_llm.py --max_frames 0 --max_samples -1
    python eval_video_llm.py --max_samples -1 --num_shards 4 --shard_id 2

    # offline smoke test with the bundled demo set and a tiny random model
    python -m k9bench.tiny_model /tmp/tiny && python -m k9bench.demo --video_dir /tmp/videos
    python eval_video_llm.py --model_name_or_path /tmp/tiny --dataset_name demo --video_dir /tmp/videos \\
        --max_frames 4 --max_new_tokens 16 --max_samples -1

Exit codes: 0 done (failed questions are records with ``error``), 1 unexpected error,
2 bad input, 3 model could not be loaded, 75 stopped by SIGTERM/SIGUSR1 (rerun to resume),
130 Ctrl-C (rerun to resume).
"""

from __future__ import annotations

import argparse
import logging
import sys

from k9bench.cli import add_dataset_args, add_logging_args, setup_logging
from k9bench.validators import str2bool

log = logging.getLogger("eval_video_llm")

DEFAULT_MODEL = "Qwen/Qwen3-VL-4B-Instruct"


def build_parser() -> argparse.ArgumentParser:
    from k9bench.inference.backend import add_backend_args
    from k9bench.inference.hf import ATTN_IMPLEMENTATIONS, DTYPES
    from k9bench.video import DECODERS, DEFAULT_DECODER, DEFAULT_FPS, DEFAULT_MAX_FRAMES, DEFAULT_MAX_PIXELS

    parser = argparse.ArgumentParser(
        description="Run a video LLM on K9-Bench and write the raw results JSON (resumable, batched).",
    )
    model = parser.add_argument_group("model (reference flags)")
    model.add_argument("--model_name_or_path", default=DEFAULT_MODEL, help="Hub model id or local folder (default: %(default)s)")
    model.add_argument("--bf16", nargs="?", const=True, default=None, type=str2bool,
                       help="load bf16 weights (default: bf16 on GPU, float32 on CPU); '--bf16 False' forces float32")
    model.add_argument("--torch_dtype", default=None, choices=DTYPES, help="weight dtype; overrides --bf16")
    model.add_argument("--trust_remote_code", action="store_true", help="allow model code from the model repository")
    model.add_argument("--attn_implementation", default=None, choices=ATTN_IMPLEMENTATIONS,
                       help="attention kernel (default: flash_attention_2 on GPU when flash-attn is installed, otherwise sdpa with a warning)")
    model.add_argument("--device", default="auto", help="cuda, cuda:1, cpu, or auto (default: %(default)s)")
    add_backend_args(parser)

    data = parser.add_argument_group("data (reference flags)")
    add_dataset_args(data)
    data.add_argument("--video_dir", default="./k9bench_videos", help="folder of {scene_name}.mp4 files (default: %(default)s)")
    data.add_argument("--auto_download", action="store_true", help="fetch missing videos first (k9bench.download)")
    data.add_argument("--download_cookies", default=None, metavar="FILE",
                      help="with --auto_download: cookies.txt for yt-dlp (YouTube's bot checks; see download_videos.py --cookies)")
    data.add_argument("--download_cookies_from_browser", default=None, metavar="BROWSER",
                      help="with --auto_download: read yt-dlp cookies from this browser (see download_videos.py --cookies_from_browser)")
    data.add_argument("--download_workers", type=int, default=4, help="with --auto_download: parallel downloads (default: %(default)s)")
    data.add_argument("--start_idx", type=int, default=0, help="first question position (0-based, dataset order; default: 0)")
    data.add_argument("--end_idx", type=int, default=None, help="stop before this position (default: the end)")
    data.add_argument("--max_samples", type=int, default=-1, help="at most this many questions after the range (default: -1 = all)")
    data.add_argument("--num_shards", type=int, default=1, help="split the videos into this many shards, e.g. for a SLURM array (default: 1)")
    data.add_argument("--shard_id", type=int, default=0, help="which shard this process runs (0-based; default: 0)")

    frames = parser.add_argument_group("video frames")
    frames.add_argument("--max_frames", type=int, default=DEFAULT_MAX_FRAMES, help="frame budget per video; 0 = text only, no video (default: %(default)s)")
    frames.add_argument("--fps", type=float, default=DEFAULT_FPS, help="frames per second sampled before the frame budget applies (default: %(default)s)")
    frames.add_argument("--max_pixels", type=int, default=DEFAULT_MAX_PIXELS, help="max pixels per resized frame (default: %(default)s = 360*420)")
    frames.add_argument("--min_pixels", type=int, default=None, help="min pixels per resized frame (default: qwen-vl-utils' video default)")
    frames.add_argument("--video_decoder", default=DEFAULT_DECODER, choices=DECODERS, help="video decoder, never swapped silently (default: %(default)s)")
    frames.add_argument("--frame_cache_dir", default=None, help="store sampled frames here and reuse them across runs")
    frames.add_argument("--prefetch_videos", type=int, default=2, help="decode this many upcoming videos in the background (default: %(default)s)")

    gen = parser.add_argument_group("prompt and generation")
    gen.add_argument("--use_system_message", type=str2bool, default=True,
                     help="True (default): the prompt is a system message; False: it opens the user turn")
    gen.add_argument("--system_prompt_file", default=None, help="use this file's text verbatim as the system prompt")
    gen.add_argument("--thinking_mode", action="store_true", help="Thinking model: default --max_new_tokens 3072")
    gen.add_argument("--max_new_tokens", type=int, default=None, help="default 2048, or 3072 with --thinking_mode")
    sampling = gen.add_mutually_exclusive_group()
    sampling.add_argument("--do_sample", dest="do_sample", action="store_true", default=None, help="sample (default: the model's generation config)")
    sampling.add_argument("--greedy", dest="do_sample", action="store_false", help="greedy decoding (default: the model's generation config)")
    gen.add_argument("--temperature", type=float, default=None, help="override the model's temperature")
    gen.add_argument("--top_p", type=float, default=None, help="override the model's top_p")
    gen.add_argument("--top_k", type=int, default=None, help="override the model's top_k")
    gen.add_argument("--seed", type=int, default=0, help="torch seed set before each batch (default: %(default)s)")
    gen.add_argument("--batch_size", type=int, default=1, help="questions of one video per generate call, left-padded (default: %(default)s)")

    out = parser.add_argument_group("output")
    out.add_argument("--output_file", default=None,
                     help="raw JSON path (default: raw_<model>_mf<frames>_n<samples>.json; .shard<i>of<n> is added when sharded)")
    out.add_argument("--no_retry_failed", action="store_true", help="on resume, keep failed records instead of retrying them")
    add_logging_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose, args.quiet)
    from k9bench.inference.runner import run

    return run(args, argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
