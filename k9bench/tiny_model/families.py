"""Tiny InternVL, Qwen2.5-Omni and Qwen3-Omni thinker checkpoints (see :mod:`k9bench.tiny_model`)."""

from __future__ import annotations

import logging
from pathlib import Path

from k9bench.tiny_model.base import SPECIAL_TOKENS, _random_weights, _save_model, _tiny_text_config, build_tokenizer

log = logging.getLogger(__name__)

# ------------------------------------------------------------------ InternVL

INTERNVL_TOKENS = ("<img>", "</img>", "<IMG_CONTEXT>", "<video>")
"""InternVL's image/video tokens (added after the Qwen special tokens)."""

INTERNVL_NAMED_TOKENS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}
"""The tokenizer attributes ``InternVLProcessor`` reads."""

INTERNVL_FRAME_SIZE = 56
"""Frame side of the tiny InternVL (the Hub models use 448): 4x4 patches of 14, 4 tokens after pixel shuffle."""

# InternVL's chat layout (ChatML turns); a video item is "<video>\n", which the processor expands to
# "Frame1: <img><IMG_CONTEXT>...</img>\nFrame2: ..."; an image item is "<IMG_CONTEXT>\n".
INTERNVL_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- else -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'video' or 'video' in item -%}"
    "{{- '<video>\\n' -}}"
    "{%- elif item['type'] == 'image' or 'image' in item -%}"
    "{{- '<IMG_CONTEXT>\\n' -}}"
    "{%- elif 'text' in item -%}"
    "{{- item['text'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)
"""The Jinja chat template stored with the tiny InternVL."""


def build_tiny_internvl(path: str | Path, seed: int = 0) -> Path:
    """Write a tiny random-weight transformers-native InternVL checkpoint to ``path``.

    Same layout as ``OpenGVLab/InternVL3_5-*-HF``: ``InternVLConfig`` (Qwen3 text model, InternVL
    vision tower, pixel-shuffle projector), ``InternVLProcessor`` with a GotOcr2 image processor and
    ``InternVLVideoProcessor`` (fixed frame size, no timestamps), chat template written here.
    """
    from transformers import GotOcr2ImageProcessor, InternVLConfig, InternVLForConditionalGeneration, InternVLProcessor, InternVLVideoProcessor

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(path, SPECIAL_TOKENS + INTERNVL_TOKENS, INTERNVL_CHAT_TEMPLATE, INTERNVL_NAMED_TOKENS)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS + INTERNVL_TOKENS}
    side, patch = INTERNVL_FRAME_SIZE, 14
    seq_len = int((side // patch) ** 2 * 0.5**2)
    config = InternVLConfig(
        text_config=_tiny_text_config("qwen3", len(tokenizer), ids, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        vision_config={
            "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
            "image_size": [side, side], "patch_size": [patch, patch], "initializer_range": 0.5,
        },
        image_token_id=ids["<IMG_CONTEXT>"],
        image_seq_length=seq_len,
        downsample_ratio=0.5,
        tie_word_embeddings=False,
    )
    config.text_config.tie_word_embeddings = False
    config.pad_token_id = ids["<|endoftext|>"]
    config.eos_token_id = ids["<|im_end|>"]
    model = _random_weights(InternVLForConditionalGeneration, config, seed, lambda m: m.lm_head, [config.eos_token_id, config.pad_token_id])
    _save_model(model, path, config.eos_token_id, config.pad_token_id)
    size = {"height": side, "width": side}
    image_processor = GotOcr2ImageProcessor(size=size, crop_to_patches=False, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    video_processor = InternVLVideoProcessor(size=size, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    processor = InternVLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor,
                                  image_seq_length=seq_len, chat_template=INTERNVL_CHAT_TEMPLATE)
    processor.save_pretrained(str(path))
    log.info("tiny InternVL written to %s (%d parameters)", path, sum(p.numel() for p in model.parameters()))
    return path


# ------------------------------------------------------------------ Qwen2.5-Omni thinker

OMNI_TOKENS = ("<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>", "<|IMAGE|>", "<|VIDEO|>", "<|vision_bos|>", "<|vision_eos|>")
"""Qwen2.5-Omni's audio and vision tokens (added after the Qwen special tokens)."""

OMNI_NAMED_TOKENS = {
    "image_token": "<|IMAGE|>",
    "audio_token": "<|AUDIO|>",
    "video_token": "<|VIDEO|>",
    "vision_bos_token": "<|vision_bos|>",
    "vision_eos_token": "<|vision_eos|>",
    "audio_bos_token": "<|audio_bos|>",
    "audio_eos_token": "<|audio_eos|>",
}
"""The tokenizer attributes ``Qwen2_5OmniProcessor`` reads."""

OMNI_AUDIO_SAMPLING_RATE = 16000
"""The Whisper feature extractor's rate (the Hub checkpoints use 16 kHz)."""

# A video item is <|vision_bos|><|VIDEO|><|vision_eos|>; with the soundtrack given as
# audio-in-video the processor expands <|VIDEO|> to <|audio_bos|>, 2-second chunks of video
# and audio tokens, <|audio_eos|>. A separate audio item is <|audio_bos|><|AUDIO|><|audio_eos|>.
OMNI_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- else -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'video' or 'video' in item -%}"
    "{{- '<|vision_bos|><|VIDEO|><|vision_eos|>' -}}"
    "{%- elif item['type'] == 'image' or 'image' in item -%}"
    "{{- '<|vision_bos|><|IMAGE|><|vision_eos|>' -}}"
    "{%- elif item['type'] == 'audio' or 'audio' in item -%}"
    "{{- '<|audio_bos|><|AUDIO|><|audio_eos|>' -}}"
    "{%- elif 'text' in item -%}"
    "{{- item['text'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)
"""The Jinja chat template stored with the tiny Qwen2.5-Omni thinker."""



def _omni_token_ids(ids: dict[str, int], suffix: str) -> dict[str, int]:
    """The Omni thinkers' special-token ids; ``suffix`` is how the config names the media tokens
    (``_index`` in Qwen2.5-Omni, ``_id`` in Qwen3-Omni)."""
    return {
        f"audio_token{suffix}": ids["<|AUDIO|>"],
        f"image_token{suffix}": ids["<|IMAGE|>"],
        f"video_token{suffix}": ids["<|VIDEO|>"],
        "audio_start_token_id": ids["<|audio_bos|>"],
        "audio_end_token_id": ids["<|audio_eos|>"],
        "vision_start_token_id": ids["<|vision_bos|>"],
        "vision_end_token_id": ids["<|vision_eos|>"],
    }


def _save_omni_processor(processor_cls, tokenizer, path: Path, patch_size: int) -> None:
    """An Omni processor (Qwen2-VL image/video processors at ``patch_size``, Whisper features at
    :data:`OMNI_AUDIO_SAMPLING_RATE`) written beside the weights."""
    from transformers import Qwen2VLImageProcessor, Qwen2VLVideoProcessor, WhisperFeatureExtractor

    unit = 2 * patch_size  # one merged token covers unit x unit pixels
    common = {"patch_size": patch_size, "temporal_patch_size": 2, "merge_size": 2}
    image_processor = Qwen2VLImageProcessor(**common, size={"shortest_edge": unit * unit, "longest_edge": 256 * unit * unit})
    video_processor = Qwen2VLVideoProcessor(**common, size={"shortest_edge": unit * unit, "longest_edge": 64 * unit * unit * 16},
                                            cap_pixels_per_frame=True)
    feature_extractor = WhisperFeatureExtractor(feature_size=128, sampling_rate=OMNI_AUDIO_SAMPLING_RATE, hop_length=160,
                                                chunk_length=300, n_fft=400, return_attention_mask=True)
    processor = processor_cls(image_processor=image_processor, video_processor=video_processor,
                              feature_extractor=feature_extractor, tokenizer=tokenizer, chat_template=OMNI_CHAT_TEMPLATE)
    processor.save_pretrained(str(path))


def _omni_tokenizer(path: Path):
    """The Omni thinkers' tokenizer written to ``path`` (made if missing), and its special tokens' ids."""
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(path, SPECIAL_TOKENS + OMNI_TOKENS, OMNI_CHAT_TEMPLATE, OMNI_NAMED_TOKENS)
    return tokenizer, {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS + OMNI_TOKENS}


def _finish_omni(model_cls, processor_cls, config, ids: dict[str, int], tokenizer, path: Path, seed: int, patch_size: int,
                 label: str) -> Path:
    """Random weights for an Omni thinker ``config``, written with its processor beside them."""
    config.pad_token_id = ids["<|endoftext|>"]
    config.eos_token_id = ids["<|im_end|>"]
    model = _random_weights(model_cls, config, seed, lambda m: m.lm_head, [config.eos_token_id, config.pad_token_id])
    _save_model(model, path, config.eos_token_id, config.pad_token_id)
    _save_omni_processor(processor_cls, tokenizer, path, patch_size=patch_size)
    log.info("tiny %s thinker written to %s (%d parameters)", label, path, sum(p.numel() for p in model.parameters()))
    return path


def build_tiny_qwen2_5omni(path: str | Path, seed: int = 0) -> Path:
    """Write a tiny random-weight Qwen2.5-Omni *thinker* checkpoint (text output only) to ``path``.

    ``Qwen2_5OmniThinkerForConditionalGeneration`` (audio encoder, Qwen2.5-VL style vision tower,
    two-layer text model) with ``Qwen2_5OmniProcessor``: Qwen2-VL image and video processors
    (patch 14, merge 2) and a Whisper feature extractor (16 kHz, 128 mel bins, 300 s window).
    """
    from transformers import (
        Qwen2_5OmniProcessor,
        Qwen2_5OmniThinkerConfig,
        Qwen2_5OmniThinkerForConditionalGeneration,
    )

    path = Path(path)
    tokenizer, ids = _omni_tokenizer(path)
    text_hidden = 64
    config = Qwen2_5OmniThinkerConfig(
        text_config=_tiny_text_config(
            "qwen2_5_omni_text", len(tokenizer), ids,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]},
        ),
        vision_config={
            "depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 14, "spatial_merge_size": 2,
            "temporal_patch_size": 2, "window_size": 112, "out_hidden_size": text_hidden, "fullatt_block_indexes": [1],
            "initializer_range": 0.5,
        },
        audio_config={
            "num_mel_bins": 128, "encoder_layers": 2, "encoder_attention_heads": 2, "encoder_ffn_dim": 64, "d_model": 32,
            "output_dim": text_hidden, "max_source_positions": 1500, "n_window": 100, "initializer_range": 0.5,
        },
        **_omni_token_ids(ids, "_index"),
        user_token_id=tokenizer.convert_tokens_to_ids("user") if "user" in tokenizer.get_vocab() else 0,
        initializer_range=0.5,
    )
    return _finish_omni(Qwen2_5OmniThinkerForConditionalGeneration, Qwen2_5OmniProcessor, config, ids, tokenizer, path, seed, 14, "Qwen2.5-Omni")


def build_tiny_qwen3omni(path: str | Path, seed: int = 0) -> Path:
    """Write a tiny random-weight Qwen3-Omni (MoE) *thinker* checkpoint (text output only) to ``path``.

    ``Qwen3OmniMoeThinkerForConditionalGeneration`` (audio encoder, Qwen3-VL style vision tower
    with patch 16, a two-layer mixture-of-experts text model with four experts) with
    ``Qwen3OmniMoeProcessor`` (same tokens and chat template as the tiny Qwen2.5-Omni; its audio
    is neither padded nor cut to a window).
    """
    from transformers import (
        Qwen3OmniMoeProcessor,
        Qwen3OmniMoeThinkerConfig,
        Qwen3OmniMoeThinkerForConditionalGeneration,
    )

    path = Path(path)
    tokenizer, ids = _omni_tokenizer(path)
    text_hidden = 64
    config = Qwen3OmniMoeThinkerConfig(
        text_config=_tiny_text_config(
            "qwen3_omni_moe_text", len(tokenizer), ids,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [4, 2, 2], "mrope_interleaved": True},
            moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
        ),
        vision_config={
            "depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 16, "spatial_merge_size": 2,
            "temporal_patch_size": 2, "out_hidden_size": text_hidden, "num_position_embeddings": 256,
            "deepstack_visual_indexes": [0], "initializer_range": 0.5,
        },
        audio_config={
            "num_mel_bins": 128, "encoder_layers": 2, "encoder_attention_heads": 2, "encoder_ffn_dim": 64, "d_model": 32,
            "output_dim": text_hidden, "n_window": 50, "n_window_infer": 800, "conv_chunksize": 500,
            "downsample_hidden_size": 16, "initializer_range": 0.5,
        },
        **_omni_token_ids(ids, "_id"),
        initializer_range=0.5,
    )
    return _finish_omni(Qwen3OmniMoeThinkerForConditionalGeneration, Qwen3OmniMoeProcessor, config, ids, tokenizer, path, seed, 16, "Qwen3-Omni")
