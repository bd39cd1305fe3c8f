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

    # every GPU of a node: 4 worker processes (CUDA_VISIBLE_DEVICES=0..3), one shard each, then one merge
    python eval_video_llm.py --max_samples -1 --data_parallel 4

    # offline smoke test with the bundled demo set and a tiny random model
    python -m k9bench.tiny_model /tmp/tiny && python -m k9bench.data.demo --video_dir /tmp/videos
    python eval_video_llm.py --model_name_or_path /tmp/tiny --dataset_name demo --video_dir /tmp/videos \\
        --max_frames 4 --max_new_tokens 16 --max_samples -1

Settings: every flag is a field of :mod:`k9bench.inference.settings` (type, default, help in one
place); the raw file's ``inference`` block holds them as run. Without ``--output_file`` the raw file is
``eval_results/raw_<model>_mf<frames>_n<samples>.json`` (the folder is made when missing).

Exit codes: 0 done (failed questions are records with ``error``), 1 every question failed or a
write failed, 2 bad input (before any model loads; a second run on the same output too), 3 model
could not be loaded, 75 stopped by SIGTERM/SIGUSR1/Ctrl-C (rerun the same command to resume).
"""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    """The flags (:func:`k9bench.inference.stage.build_parser`, generated from :mod:`k9bench.inference.settings`)."""
    from k9bench.inference.stage import build_parser as package_parser

    return package_parser()


def main(argv: list[str] | None = None) -> int:
    """Parse, check every flag, then run the stage (:class:`k9bench.inference.stage.InferenceStage`)."""
    from k9bench.inference.stage import main as stage_main

    return stage_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
