"""Benchmark at full size: the HF paths of eval_video_llm.py on a random-weight model with Qwen3-VL-4B-Instruct's
architecture, on a GPU (or reduced on CPU).

Builds, offline, a random-weight model with Qwen3-VL-4B-Instruct's architecture (36 layers x 2560, 32 heads / 8
key-value heads, 24-block vision tower with deepstack; the tokenizer, chat template and processors of
``k9bench.tiny_model``, so the vocabulary is the tiny one: the embedding and the tied lm_head are far smaller than the
real 151,936-token ones), saves it in bf16 under the work folder, and hands it to ``bench/bench_inference.py``
(``--model``), which times batch size 1 (``--skip_b1``: not), batches of ``--batch_size`` within one video, and
batched ``generate`` across videos at ``--new_batch_size`` (default ``auto``: the free-memory rule) on the same
questions, and prints questions/s, the ratio, the batches and how many answers equal the baseline's (bf16: a batch
may change some, see docs/inference.md). Random weights never stop early: every answer runs to ``--max_new_tokens``.

Usage::

    # CPU, reduced model (a few minutes on a shared 2-core machine)
    python bench/bench_gpu.py --device cpu --layers 2 --hidden 256 --vision_depth 2 --vision_hidden 128 \\
        --videos 10 --max_frames 8 --max_pixels 50176 --min_pixels 2048 --max_new_tokens 32 --video_size 320x240 --video_seconds 12
    # one GPU, the full 4B architecture, 32 frames, 64 new tokens
    python bench/bench_gpu.py --device cuda --skip_b1 --json_out gpu.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

QWEN3_VL_4B = dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                   num_key_value_heads=8, head_dim=128)
"""Qwen3-VL-4B-Instruct's language model (public config)."""


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help="cuda, cpu, or auto: cuda when visible (default)")
    p.add_argument("--layers", type=int, default=QWEN3_VL_4B["num_hidden_layers"], help="language model layers (36)")
    p.add_argument("--hidden", type=int, default=QWEN3_VL_4B["hidden_size"], help="language model width (2560)")
    p.add_argument("--vision_depth", type=int, default=24, help="vision tower blocks (24)")
    p.add_argument("--vision_hidden", type=int, default=1024, help="vision tower width (1024)")
    p.add_argument("--videos", type=int, default=40, help="videos")
    p.add_argument("--distinct_videos", type=int, default=2, help="distinct clips generated, copied under --videos names")
    p.add_argument("--questions_per_video", type=int, default=5, help="questions per video (K9-Bench has 5.2)")
    p.add_argument("--video_seconds", type=float, default=60.0, help="clip length")
    p.add_argument("--video_size", default="1280x720", help="clip WIDTHxHEIGHT")
    p.add_argument("--max_frames", type=int, default=32)
    p.add_argument("--max_pixels", type=int, default=360 * 420)
    p.add_argument("--min_pixels", type=int, default=2048)
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=8, help="batches within one video (the reference's --batch_size 8 pattern)")
    p.add_argument("--new_batch_size", default="auto", help="batched generate across videos: a number, or auto (default)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--skip_b1", action="store_true", help="no batch-size-1 run; the ratio is against batches within one video")
    p.add_argument("--min_ratio", type=float, default=1.0, help="required questions/s ratio of the batched path")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave torch's default)")
    p.add_argument("--work_dir", default=None, help="where the model and videos go (default: a temporary folder, removed)")
    p.add_argument("--json_out", default=None, help="write the figures here")
    return p


def build_model(args, work: Path):
    """A random-weight Qwen3-VL (4B architecture unless reduced) and its processor, in memory."""
    import torch
    from transformers import (GenerationConfig, Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration,
                              Qwen3VLProcessor, Qwen3VLVideoProcessor)

    from k9bench.tiny_model import CHAT_TEMPLATE, SPECIAL_TOKENS, build_tokenizer

    tok = build_tokenizer(work / "tokenizer")
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    text = dict(QWEN3_VL_4B)
    text["num_hidden_layers"] = args.layers
    if args.hidden != QWEN3_VL_4B["hidden_size"]:
        head_dim = 128 if args.hidden >= 1024 else 32
        heads = max(1, args.hidden // head_dim)
        text.update(hidden_size=args.hidden, intermediate_size=int(args.hidden * 3.8) // 64 * 64 or 64, head_dim=head_dim,
                    num_attention_heads=heads, num_key_value_heads=max(1, heads // 4))
    half = text["head_dim"] // 2
    section = [half - 2 * (half * 5 // 16), half * 5 // 16, half * 5 // 16]  # [24, 20, 20] at head_dim 128
    deep = [i for i in (5, 11, 17) if i < args.vision_depth] or [0]
    vision_heads = max(1, args.vision_hidden // 64)
    config = Qwen3VLConfig(
        text_config={**text, "vocab_size": len(tok), "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": section,
                                         "mrope_interleaved": True},
                     "pad_token_id": ids["<|endoftext|>"], "bos_token_id": None, "eos_token_id": ids["<|im_end|>"],
                     "tie_word_embeddings": True},
        vision_config={"depth": args.vision_depth, "hidden_size": args.vision_hidden, "intermediate_size": args.vision_hidden * 4,
                       "num_heads": vision_heads, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                       "out_hidden_size": text["hidden_size"], "num_position_embeddings": 2304, "deepstack_visual_indexes": deep,
                       "hidden_act": "gelu_pytorch_tanh"},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=True,
    )
    config.pad_token_id = ids["<|endoftext|>"]
    config.eos_token_id = ids["<|im_end|>"]
    torch.manual_seed(0)
    device = "cuda" if args.device.startswith("cuda") or (args.device == "auto" and torch.cuda.is_available()) else "cpu"
    with torch.device(device):  # built where it is fast to initialise, saved in bf16
        model = Qwen3VLForConditionalGeneration._from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb.normal_(0.0, 1.0)  # wide: greedy decoding stays varied
        for tid in (config.eos_token_id, config.pad_token_id):
            emb[tid].mul_(0.0)  # tied head: never stop early (every answer runs to max_new_tokens)
    model.eval()
    gen = GenerationConfig(bos_token_id=None, eos_token_id=[config.eos_token_id, config.pad_token_id],
                           pad_token_id=config.pad_token_id, do_sample=False, max_new_tokens=args.max_new_tokens)
    model.generation_config = gen
    tok.padding_side = "left"
    image_processor = Qwen2VLImageProcessor(patch_size=16, temporal_patch_size=2, merge_size=2,
                                            size={"shortest_edge": 65536, "longest_edge": 16777216},
                                            image_mean=[0.5] * 3, image_std=[0.5] * 3)
    video_processor = Qwen3VLVideoProcessor(patch_size=16, temporal_patch_size=2, merge_size=2,
                                            size={"shortest_edge": 4096, "longest_edge": 25165824},
                                            image_mean=[0.5] * 3, image_std=[0.5] * 3, fps=2, min_frames=4, max_frames=768,
                                            cap_pixels_per_frame=True)
    processor = Qwen3VLProcessor(image_processor=image_processor, tokenizer=tok, video_processor=video_processor,
                                 chat_template=CHAT_TEMPLATE)
    return model, processor, gen



def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    import bench_inference

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory(prefix="k9bench-gpu-", dir=args.work_dir) as tmp:
        work = Path(tmp)
        model, processor, _ = build_model(args, work)
        model.save_pretrained(work / "model")
        processor.save_pretrained(work / "model")
        del model
        print(f"model: {args.layers} layers x {args.hidden}, vision {args.vision_depth} x {args.vision_hidden}, saved in bf16")
        forward = ["--model", str(work / "model"), "--device", device, "--threads", str(args.threads),
                   "--dtype", "bfloat16" if device.startswith("cuda") else "float32"]
        for name in ("videos", "distinct_videos", "questions_per_video", "video_seconds", "video_size", "max_frames", "max_pixels",
                     "min_pixels", "max_new_tokens", "batch_size", "new_batch_size", "repeats", "min_ratio", "json_out"):
            value = getattr(args, name)
            if value is not None:
                forward += [f"--{name}", str(value)]
        return bench_inference.main(forward + (["--skip_b1"] if args.skip_b1 else []))


if __name__ == "__main__":
    raise SystemExit(main())
