"""Run a video LLM on K9-Bench questions and write the raw JSON (SPEC section 2).

Usage::

    # the reference run: Qwen3-VL-4B-Instruct, 32 frames at 1 fps, first 10 questions
    python eval_video_llm.py --model_name_or_path Qwen/Qwen3-VL-4B-Instruct --video_dir k9bench_videos \\
        --max_frames 32 --max_samples 10

    # all questions, fetching missing videos first; rerun the same line to resume. --batch_size auto
    # (the default): 1 on CPU, on a GPU the largest batch that fits; batches span videos and each
    # video's prefix is computed once (Qwen-VL); --batch_size N forces N questions per batch
    python eval_video_llm.py --model_name_or_path Qwen/Qwen3-VL-8B-Instruct --max_samples -1 \\
        --auto_download --output_file eval_results/raw_Qwen3-VL-8B-Instruct_mf32_n-1.json

    # InternVL3.5 (transformers-native checkpoint, 32 frames at its processor's fixed size)
    python eval_video_llm.py --model_name_or_path OpenGVLab/InternVL3_5-8B-HF --max_frames 32 --max_samples -1

    # audio + video: an Omni thinker checkpoint (model_type qwen2_5_omni_thinker or qwen3_omni_moe_thinker,
    # e.g. python -m k9bench.tiny_model /tmp/omni --family qwen2_5_omni) hears each video's soundtrack
    # (files named ..._av.json); by API the soundtrack is one input_audio part after the frames
    python eval_video_llm.py --model_name_or_path /tmp/omni --audio --max_samples -1
    python eval_video_llm.py --backend openai --api_model gemini-2.5-pro \\
        --base_url https://generativelanguage.googleapis.com/v1beta/openai/ --video_fps 1 --audio --max_samples -1

    # the reference's --use_system_message False: an empty system turn, the model gets no instructions;
    # for a chat template without a system role, put the instructions in the user turn instead
    python eval_video_llm.py --use_system_message False
    python eval_video_llm.py --use_system_message False --instructions_in_user_turn

    # a Thinking model; text-only baseline (no video); shard 2 of a 4-task SLURM array
    python eval_video_llm.py --model_name_or_path Qwen/Qwen3-VL-4B-Thinking --thinking_mode
    python eval_video_llm.py --max_frames 0 --max_samples -1
    python eval_video_llm.py --max_samples -1 --num_shards 4 --shard_id 2

    # offline smoke test with the bundled demo set and a tiny random model
    python -m k9bench.tiny_model /tmp/tiny && python -m k9bench.demo --video_dir /tmp/videos
    python eval_video_llm.py --model_name_or_path /tmp/tiny --dataset_name demo --video_dir /tmp/videos \\
        --max_frames 4 --max_new_tokens 16 --max_samples -1

Settings: every flag is a field of :mod:`k9bench.inference.settings` (type, default, help in one
place); the raw file's ``inference`` block holds them as run.

Exit codes: 0 done (failed questions are records with ``error``), 1 unexpected error,
2 bad input, 3 model could not be loaded, 75 stopped by SIGTERM/SIGUSR1 (rerun to resume),
130 Ctrl-C (rerun to resume).
"""

from __future__ import annotations

import argparse
import logging
import sys

from k9bench.cli import ArgumentParser, add_dataset_args, add_logging_args, setup_logging

log = logging.getLogger("eval_video_llm")


def build_parser() -> argparse.ArgumentParser:
    """The flags, generated from the settings classes of :mod:`k9bench.inference.settings`."""
    from k9bench.inference.settings import (
        DataSettings,
        FrameSettings,
        GenerationSettings,
        HFSettings,
        ModelSettings,
        OutputSettings,
        PromptSettings,
        add_openai_arguments,
    )
    from k9bench.settings import add_arguments, default_of

    parser = ArgumentParser(
        description="Run a video LLM on K9-Bench and write the raw results JSON (resumable, batched).",
    )
    model = parser.add_argument_group("model (reference flags)")
    add_arguments(model, ModelSettings, only=("model_name_or_path",))
    add_arguments(model, HFSettings)
    add_arguments(model, ModelSettings, only=("backend",))
    add_openai_arguments(parser.add_argument_group("OpenAI-compatible backend (--backend openai)"))

    data = parser.add_argument_group("data (reference flags)")
    add_dataset_args(data)
    add_arguments(data, DataSettings)

    add_arguments(parser.add_argument_group("video frames"), FrameSettings)

    gen = parser.add_argument_group("prompt and generation")
    add_arguments(gen, PromptSettings)
    add_arguments(gen, GenerationSettings)
    sampling = gen.add_mutually_exclusive_group()
    sampling.add_argument("--do_sample", dest="do_sample", action="store_true", default=default_of(GenerationSettings, "do_sample"),
                          help="sample (default: the model's generation config)")
    sampling.add_argument("--greedy", dest="do_sample", action="store_false", help="greedy decoding (default: the model's generation config)")

    add_arguments(parser.add_argument_group("output"), OutputSettings)
    add_logging_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a bad flag value (argparse printed one line) or --help
        return exc.code if isinstance(exc.code, int) else 2
    setup_logging(args.verbose, args.quiet)
    from k9bench.redact import install_log_filter

    install_log_filter()
    from k9bench.inference.runner import run
    from k9bench.inference.settings import config_from_namespace, resolve

    config = resolve(config_from_namespace(args))
    return run(config, argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
