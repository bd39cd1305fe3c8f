"""Tiny random-weight checkpoints (Qwen3-VL and other families), built offline, for tests, demos and benchmarks.

Everything is generated locally (nothing comes from the Hub): a small byte-level BPE
tokenizer trained on a few sentences written here, with the Qwen special tokens
(``<|im_start|>``, ``<|im_end|>``, ``<|vision_start|>``, ``<|video_pad|>``, ``<think>`` ...),
a Qwen3-VL style chat template, the Qwen2-VL image processor, the Qwen3-VL video processor,
a generation config, and a two-layer language model with a two-block vision tower.

The folder loads with ``AutoProcessor.from_pretrained(path)`` and
``AutoModelForImageTextToText.from_pretrained(path)`` in about a second, and ``generate``
runs on CPU. The weights are random, so the text is gibberish, but it is varied (the
initialisation is wide enough that greedy decoding does not collapse onto one token)
and deterministic for a given ``seed``.

Usage::

    python -m k9bench.tiny_model /tmp/tiny-qwen3vl
    python -m k9bench.tiny_model /tmp/tiny-qwen3vl --seed 1
    python -m k9bench.tiny_model /tmp/tiny-qwen25vl --family qwen2_5_vl   # a tiny Qwen2.5-VL too
    python -m k9bench.tiny_model /tmp/tiny-internvl --family internvl      # transformers-native InternVL
    python -m k9bench.tiny_model /tmp/tiny-omni --family qwen2_5_omni      # Qwen2.5-Omni thinker (audio + video in)
    python -m k9bench.tiny_model /tmp/tiny-omni3 --family qwen3_omni       # Qwen3-Omni (MoE) thinker

The other families are built the same way (local tokenizer, the family's own processor classes
and a chat template written here; ``FAMILIES`` lists them):

- ``internvl``: ``InternVLForConditionalGeneration`` with ``InternVLProcessor`` (GotOcr2 image
  processor, ``InternVLVideoProcessor`` with a fixed 56x56 frame size, ``<video>`` expanded to
  ``FrameN: <img><IMG_CONTEXT>...</img>`` per frame), as the Hub's ``OpenGVLab/InternVL3_5-*-HF``
  checkpoints are laid out (Qwen3 text model);
- ``qwen2_5_omni``: ``Qwen2_5OmniThinkerForConditionalGeneration`` (text output only) with
  ``Qwen2_5OmniProcessor`` (Qwen2-VL image/video processors and a Whisper feature extractor at
  16 kHz, 128 mel bins, 300 s window), which takes a video's soundtrack as audio-in-video input;
- ``qwen3_omni``: ``Qwen3OmniMoeThinkerForConditionalGeneration`` with ``Qwen3OmniMoeProcessor``
  (patch 16, a four-expert MoE text model; audio neither padded nor cut).

Every folder loads with ``AutoProcessor`` and ``AutoModelForImageTextToText``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

log = logging.getLogger(__name__)

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
"""Special tokens, in the order Qwen numbers them (after the ordinary vocabulary)."""

EXTRA_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>")
"""Added (non-special) tokens of the Qwen3 vocabulary that the tiny model also knows."""

VOCAB_SIZE = 600
"""Size of the trained byte-level BPE vocabulary (before the added tokens)."""

# A chat template in the Qwen3-VL style, written for this project. A video item becomes
# <|vision_start|><|video_pad|><|vision_end|> (the processor expands it to per-frame
# timestamps and patches); an image item the same with <|image_pad|>. With
# add_generation_prompt the assistant turn is opened; enable_thinking=False closes an empty
# <think></think> block (Thinking-style prompts), enable_thinking=True opens "<think>\n".
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- else -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'video' or 'video' in item -%}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif item['type'] == 'image' or 'image' in item -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in item -%}"
    "{{- item['text'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- elif enable_thinking is defined and enable_thinking is true -%}"
    "{{- '<think>\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)
"""The Jinja chat template stored with the tiny model."""

_CORPUS = """
The dog sits on the grass and watches the ball. The puppy runs to the door when the bell rings.
A brown dog wags its tail and jumps toward the child. The dog lowers its head, ears back, and walks away.
The answer is that the dog is playing. The reasoning is step by step: first the dog looks, then it barks.
{"reasoning": "The dog turns around twice before lying down.", "answer": "The dog is getting ready to rest."}
The owner throws a stick; the dog chases it, picks it up and brings it back. Two dogs greet each other.
The cat hisses, the dog backs off and sits. Why does the dog bark? Because a stranger is at the gate.
What does the dog do after eating? It drinks water and lies on the floor near the window.
0 1 2 3 4 5 6 7 8 9 seconds frames video question options A B C D E yes no happy calm alert tired.
"""


def _train_bpe(vocab_size: int = VOCAB_SIZE) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Train a small byte-level BPE on the built-in corpus; return ``(vocab, merges)``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        special_tokens=[],
    )
    lines = [line for line in _CORPUS.strip().splitlines() if line.strip()]
    tok.train_from_iterator(lines * 4, trainer=trainer)
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in data["model"]["merges"]]
    return vocab, merges


def build_tokenizer(
    out_dir: str | Path,
    special_tokens: tuple[str, ...] = SPECIAL_TOKENS,
    chat_template: str = CHAT_TEMPLATE,
    named_tokens: dict[str, str] | None = None,
):
    """Build, save into ``out_dir`` and return the tiny Qwen2-style tokenizer.

    ``special_tokens`` are added in order after the trained vocabulary; ``named_tokens`` maps
    attribute names the family's processor reads (``video_token``, ``audio_bos_token``...) to
    tokens (stored as the tokenizer's ``extra_special_tokens``, so ``tokenizer.video_token`` and
    ``tokenizer.video_token_id`` exist after loading).
    """
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    vocab, merges = _train_bpe()
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        errors="replace",
        model_max_length=32768,
        **({"extra_special_tokens": dict(named_tokens)} if named_tokens else {}),
    )
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens], special_tokens=True)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in EXTRA_TOKENS])
    tokenizer.chat_template = chat_template
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(str(out_dir))
    return tokenizer


def build_config(tokenizer, seed: int = 0):
    """The tiny Qwen3-VL configuration, its token ids taken from ``tokenizer``."""
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
            "head_dim": 16,
            "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [4, 2, 2], "mrope_interleaved": True},
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


def build_tiny_qwen3vl(path: str | Path, seed: int = 0) -> Path:
    """Write a tiny random-weight Qwen3-VL checkpoint (model, tokenizer, processors) to ``path``.

    Deterministic for a given ``seed``. Returns ``path``.
    """
    import torch
    from transformers import GenerationConfig, Qwen2VLImageProcessor, Qwen3VLForConditionalGeneration, Qwen3VLProcessor, Qwen3VLVideoProcessor

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(path)
    config = build_config(tokenizer, seed)

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
    model.save_pretrained(str(path))
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
    model.save_pretrained(str(path))
    gen.save_pretrained(str(path))
    image_processor = Qwen2VLImageProcessor(patch_size=14, temporal_patch_size=2, merge_size=2,
                                            size={"shortest_edge": 28 * 28, "longest_edge": 256 * 28 * 28})
    video_processor = Qwen2VLVideoProcessor(patch_size=14, temporal_patch_size=2, merge_size=2,
                                            size={"shortest_edge": 28 * 28, "longest_edge": 64 * 28 * 28 * 16})
    processor = Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor,
                                    chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(str(path))
    return path


def _random_weights(model_class, config, seed: int, head, stop_ids: list[int]):
    """``model_class(config)`` with seeded random weights; a wide LM head, stop-token logits dampened.

    The caller's global RNG state is left as it was.
    """
    import torch

    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = model_class(config)
        with torch.no_grad():
            # a wide init keeps greedy decoding varied; zeroed stop rows let generations run a while
            weight = head(model).weight
            weight.normal_(0.0, 1.0)
            for tid in stop_ids:
                weight[tid].mul_(0.0)
    finally:
        torch.random.set_rng_state(state)
    return model.eval()


def _save_model(model, path: Path, eos_id: int, pad_id: int) -> None:
    from transformers import GenerationConfig

    gen = GenerationConfig(bos_token_id=None, eos_token_id=[eos_id, pad_id], pad_token_id=pad_id, do_sample=False, max_new_tokens=32)
    model.generation_config = gen
    model.save_pretrained(str(path))
    gen.save_pretrained(str(path))


def _tiny_text_config(model_type: str, vocab_size: int, ids: dict[str, int], **extra) -> dict:
    """A two-layer text model of ``model_type`` (hidden 64, head dim 16)."""
    return {
        "model_type": model_type, "vocab_size": vocab_size, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "max_position_embeddings": 4096, "initializer_range": 0.5, "pad_token_id": ids["<|endoftext|>"],
        "bos_token_id": None, "eos_token_id": ids["<|im_end|>"], **extra,
    }


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
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(path, SPECIAL_TOKENS + OMNI_TOKENS, OMNI_CHAT_TEMPLATE, OMNI_NAMED_TOKENS)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS + OMNI_TOKENS}
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
    config.pad_token_id = ids["<|endoftext|>"]
    config.eos_token_id = ids["<|im_end|>"]
    model = _random_weights(Qwen2_5OmniThinkerForConditionalGeneration, config, seed, lambda m: m.lm_head,
                            [config.eos_token_id, config.pad_token_id])
    _save_model(model, path, config.eos_token_id, config.pad_token_id)
    _save_omni_processor(Qwen2_5OmniProcessor, tokenizer, path, patch_size=14)
    log.info("tiny Qwen2.5-Omni thinker written to %s (%d parameters)", path, sum(p.numel() for p in model.parameters()))
    return path


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
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(path, SPECIAL_TOKENS + OMNI_TOKENS, OMNI_CHAT_TEMPLATE, OMNI_NAMED_TOKENS)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS + OMNI_TOKENS}
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
    config.pad_token_id = ids["<|endoftext|>"]
    config.eos_token_id = ids["<|im_end|>"]
    model = _random_weights(Qwen3OmniMoeThinkerForConditionalGeneration, config, seed, lambda m: m.lm_head,
                            [config.eos_token_id, config.pad_token_id])
    _save_model(model, path, config.eos_token_id, config.pad_token_id)
    _save_omni_processor(Qwen3OmniMoeProcessor, tokenizer, path, patch_size=16)
    log.info("tiny Qwen3-Omni thinker written to %s (%d parameters)", path, sum(p.numel() for p in model.parameters()))
    return path


FAMILIES = {
    "qwen3_vl": build_tiny_qwen3vl,
    "qwen2_5_vl": build_tiny_qwen2_5vl,
    "internvl": build_tiny_internvl,
    "qwen2_5_omni": build_tiny_qwen2_5omni,
    "qwen3_omni": build_tiny_qwen3omni,
}
"""Family name -> builder ``(path, seed=0) -> path``."""

FAMILY_ALIASES = {"qwen3vl": "qwen3_vl", "qwen2_5vl": "qwen2_5_vl", "qwen2_5omni": "qwen2_5_omni", "qwen3omni": "qwen3_omni"}
"""Other spellings ``--family`` accepts."""


def build_tiny(family: str, path: str | Path, seed: int = 0) -> Path:
    """Build the tiny checkpoint of ``family`` (a ``FAMILIES`` key or alias) at ``path``."""
    name = FAMILY_ALIASES.get(family, family)
    if name not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose one of {', '.join(FAMILIES)}")
    return FAMILIES[name](path, seed=seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m k9bench.tiny_model", description=__doc__.split("\n\n")[0])
    parser.add_argument("output_dir", help="folder to write the checkpoint into")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default: %(default)s)")
    parser.add_argument("--family", choices=(*FAMILIES, *FAMILY_ALIASES), default="qwen3_vl",
                        help="model family (default: %(default)s; qwen3vl, qwen2_5vl, qwen2_5omni, qwen3omni are accepted spellings too)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    out = build_tiny(args.family, args.output_dir, seed=args.seed)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
