"""Tiny Qwen3-VL and Qwen2.5-VL checkpoints (see :mod:`k9bench.tiny_model`)."""

from __future__ import annotations

import logging
from pathlib import Path

from k9bench.tiny_model.base import CHAT_TEMPLATE, SPECIAL_TOKENS, build_tokenizer, save_weights

log = logging.getLogger(__name__)

DEFAULT_HEAD_DIM = 16
"""The tiny Qwen3-VL's attention head size (``--head_dim``)."""


def mrope_section(head_dim: int) -> list[int]:
    """Qwen3-VL's ``mrope_section`` for ``head_dim``: half the head size split 2:1:1 (t, h, w); 16 -> [4, 2, 2]."""
    half = head_dim // 2
    return [half // 2, half // 4, half // 4]



def build_config(tokenizer, seed: int = 0, head_dim: int = DEFAULT_HEAD_DIM):
    """The tiny Qwen3-VL configuration, its token ids taken from ``tokenizer`` (``head_dim``: see :func:`mrope_section`)."""
    from transformers import Qwen3VLConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    text_hidden = 64
    config = Qwen3VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": text_hidden,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": head_dim,
            "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": mrope_section(head_dim), "mrope_interleaved": True},
            "initializer_range": 0.5,
            "pad_token_id": ids["<|endoftext|>"],
            "bos_token_id": None,
            "eos_token_id": ids["<|im_end|>"],
            "tie_word_embeddings": False,
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": text_hidden,
            "num_position_embeddings": 256,
            "deepstack_visual_indexes": [0],
            "initializer_range": 0.5,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    config.pad_token_id = ids["<|endoftext|>"]
    config.eos_token_id = ids["<|im_end|>"]
    return config


def build_tiny_qwen3vl(path: str | Path, seed: int = 0, head_dim: int = DEFAULT_HEAD_DIM) -> Path:
    """Write a tiny random-weight Qwen3-VL checkpoint (model, tokenizer, processors) to ``path``.

    Deterministic for a given ``seed`` and ``head_dim``. Returns ``path``.
    """
    import torch
    from transformers import GenerationConfig, Qwen2VLImageProcessor, Qwen3VLForConditionalGeneration, Qwen3VLProcessor, Qwen3VLVideoProcessor

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(path)
    config = build_config(tokenizer, seed, head_dim)

    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = Qwen3VLForConditionalGeneration(config)
        with torch.no_grad():
            # A wide random init keeps greedy decoding varied; dampen the EOS/pad logits so
            # generations run for a while instead of stopping at once.
            head = model.lm_head.weight
            head.normal_(0.0, 1.0)
            for tid in (config.eos_token_id, config.pad_token_id):
                head[tid].mul_(0.0)
    finally:
        torch.random.set_rng_state(state)
    model.eval()
    gen = GenerationConfig(
        bos_token_id=None,
        eos_token_id=[config.eos_token_id, config.pad_token_id],
        pad_token_id=config.pad_token_id,
        do_sample=False,
        max_new_tokens=32,
    )
    model.generation_config = gen
    save_weights(model, path)
    gen.save_pretrained(str(path))

    image_processor = Qwen2VLImageProcessor(
        patch_size=16, temporal_patch_size=2, merge_size=2,
        size={"shortest_edge": 32 * 32, "longest_edge": 256 * 32 * 32},
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    )
    video_processor = Qwen3VLVideoProcessor(
        patch_size=16, temporal_patch_size=2, merge_size=2,
        size={"shortest_edge": 32 * 32, "longest_edge": 64 * 32 * 32 * 16},
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
        fps=2, min_frames=2, max_frames=64, cap_pixels_per_frame=True,
    )
    processor = Qwen3VLProcessor(
        image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor, chat_template=CHAT_TEMPLATE
    )
    processor.save_pretrained(str(path))
    log.info("tiny Qwen3-VL written to %s (%d parameters)", path, sum(p.numel() for p in model.parameters()))
    return path


def build_tiny_qwen2_5vl(path: str | Path, seed: int = 0) -> Path:
    """Write a tiny random-weight Qwen2.5-VL checkpoint to ``path`` (same tokenizer and template).

    Used to check that the inference backend needs no model-specific code (patch size 14,
    ``second_per_grid_ts`` instead of per-frame timestamps).
    """
    import torch
    from transformers import (
        GenerationConfig,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(path)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    text_hidden = 64
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer), "hidden_size": text_hidden, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]},
            "initializer_range": 0.5, "pad_token_id": ids["<|endoftext|>"], "bos_token_id": None, "eos_token_id": ids["<|im_end|>"],
        },
        vision_config={
            "depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 14, "spatial_merge_size": 2,
            "temporal_patch_size": 2, "window_size": 112, "out_hidden_size": text_hidden, "fullatt_block_indexes": [1],
            "initializer_range": 0.5,
        },
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
    )
    config.pad_token_id = ids["<|endoftext|>"]
    config.eos_token_id = ids["<|im_end|>"]
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = Qwen2_5_VLForConditionalGeneration(config)
        with torch.no_grad():
            model.lm_head.weight.normal_(0.0, 1.0)
            for tid in (config.eos_token_id, config.pad_token_id):
                model.lm_head.weight[tid].mul_(0.0)
    finally:
        torch.random.set_rng_state(state)
    model.eval()
    gen = GenerationConfig(bos_token_id=None, eos_token_id=[config.eos_token_id, config.pad_token_id], pad_token_id=config.pad_token_id,
                           do_sample=False, max_new_tokens=32)
    model.generation_config = gen
    save_weights(model, path)
    gen.save_pretrained(str(path))
    image_processor = Qwen2VLImageProcessor(patch_size=14, temporal_patch_size=2, merge_size=2,
                                            size={"shortest_edge": 28 * 28, "longest_edge": 256 * 28 * 28})
    video_processor = Qwen2VLVideoProcessor(patch_size=14, temporal_patch_size=2, merge_size=2,
                                            size={"shortest_edge": 28 * 28, "longest_edge": 64 * 28 * 28 * 16})
    processor = Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor,
                                    chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(str(path))
    return path
