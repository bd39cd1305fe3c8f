"""The tiny models' shared parts: the locally trained tokenizer, the Qwen special tokens and chat
template, seeded random weights and the saving of a checkpoint (see :mod:`k9bench.tiny_model`)."""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def quiet_progress():
    """transformers' tqdm bars (``Writing model shards``) off inside the block when stderr is not a terminal."""
    from transformers.utils import logging as hf_logging

    if sys.stderr.isatty() or not hf_logging.is_progress_bar_enabled():
        yield
        return
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.enable_progress_bar()


def save_weights(model, path: Path) -> None:
    """``model.save_pretrained(path)`` without a progress bar in a log."""
    with quiet_progress():
        model.save_pretrained(str(path))


def _save_model(model, path: Path, eos_id: int, pad_id: int) -> None:
    from transformers import GenerationConfig

    gen = GenerationConfig(bos_token_id=None, eos_token_id=[eos_id, pad_id], pad_token_id=pad_id, do_sample=False, max_new_tokens=32)
    model.generation_config = gen
    save_weights(model, path)
    gen.save_pretrained(str(path))


def _tiny_text_config(model_type: str, vocab_size: int, ids: dict[str, int], **extra) -> dict:
    """A two-layer text model of ``model_type`` (hidden 64, head dim 16)."""
    return {
        "model_type": model_type, "vocab_size": vocab_size, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "max_position_embeddings": 4096, "initializer_range": 0.5, "pad_token_id": ids["<|endoftext|>"],
        "bos_token_id": None, "eos_token_id": ids["<|im_end|>"], **extra,
    }
