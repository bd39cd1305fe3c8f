"""A tiny random-weight Qwen3-VL checkpoint, built offline, for tests, demos and benchmarks.

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


def build_tokenizer(out_dir: str | Path):
    """Build, save into ``out_dir`` and return the tiny Qwen2-style tokenizer."""
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
    )
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS], special_tokens=True)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in EXTRA_TOKENS])
    tokenizer.chat_template = CHAT_TEMPLATE
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m k9bench.tiny_model", description=__doc__.split("\n\n")[0])
    parser.add_argument("output_dir", help="folder to write the checkpoint into")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default: %(default)s)")
    parser.add_argument("--family", choices=("qwen3_vl", "qwen2_5_vl"), default="qwen3_vl", help="model family (default: %(default)s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    build = build_tiny_qwen3vl if args.family == "qwen3_vl" else build_tiny_qwen2_5vl
    out = build(args.output_dir, seed=args.seed)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
