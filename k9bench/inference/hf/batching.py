"""``--batch_size auto`` for the transformers backend: the largest batch of ``generate`` the free accelerator memory holds.

Batched ``generate`` keeps one row per question: its whole prompt (video tokens included) and its generated tokens
in the key/value cache, its logits, and the prefill's working memory (the MLP's activations; the attention kernels
used on a GPU, flash-attention and sdpa's, keep no tokens x tokens scores), all rows at once. :class:`MemoryModel` is that arithmetic; :func:`auto_batch_size` takes the
largest batch whose rows fit a share of the free memory (1 on CPU: the reference's batch size). An
out-of-memory error halves the size (:meth:`k9bench.inference.batching.BatchSizeChoice.halve`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from k9bench.inference.batching import AUTO, BatchSizeChoice

DEFAULT_MAX_AUTO_BATCH = 256
"""Upper bound of an automatic batch size; below it the free memory decides."""

DEFAULT_MEMORY_FRACTION = 0.85
"""Share of the free accelerator memory an automatic batch may plan to use."""

TEXT_TOKENS = 512
"""The estimate of a question's text tokens (system turn, timestamps, question, options)."""


@dataclass(frozen=True)
class MemoryModel:
    """Accelerator bytes one row (question) of a batched ``generate`` needs."""

    kv_bytes_per_token: int
    """Key/value cache per token for the whole language model: 2 * layers * kv_heads * head_dim * dtype bytes."""
    prompt_tokens: int
    """Estimated prompt tokens of a question (video + text)."""
    max_new_tokens: int
    prefill_bytes: int = 0
    """The prefill's working memory per row: the MLP's activations (tokens x intermediate x 3 x dtype bytes)."""
    logits_bytes: int = 0
    """Logits of one position in float32, twice (the scores and the processed scores)."""

    def row_bytes(self) -> int:
        return self.kv_bytes_per_token * (self.prompt_tokens + self.max_new_tokens) + self.prefill_bytes + self.logits_bytes

    def batch_bytes(self, batch: int) -> int:
        return batch * self.row_bytes()


def memory_model(config: Any, *, dtype_bytes: int, prompt_tokens: int, max_new_tokens: int) -> MemoryModel:
    """A :class:`MemoryModel` from a transformers config (its ``text_config`` when it has one)."""
    text = getattr(config, "text_config", None) or config
    heads = int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    kv = 2 * int(text.num_hidden_layers) * kv_heads * head_dim * dtype_bytes
    prefill = prompt_tokens * int(text.intermediate_size) * 3 * dtype_bytes
    return MemoryModel(kv_bytes_per_token=kv, prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
                       prefill_bytes=prefill, logits_bytes=2 * int(text.vocab_size) * 4)


def prompt_tokens_estimate(policy: Any, patch_size: int | None, *, max_frames: int, max_pixels: int | None) -> int:
    """Language-model tokens of a question at the frame budget: fixed-size frames (InternVL) by the family's frame size
    and patch, Qwen-style grids one token per 2x2 merged patch per temporal pair; plus :data:`TEXT_TOKENS`."""
    from k9bench.video.sampling import DEFAULT_MAX_PIXELS

    if not max_frames:
        return TEXT_TOKENS
    if policy is not None and policy.frame_size and policy.frame_patch:
        (height, width), (patch, temporal) = policy.frame_size, policy.frame_patch
    else:
        patch, temporal = patch_size or 14, 2
        side = int((max_pixels or DEFAULT_MAX_PIXELS) ** 0.5)
        height = width = max(2 * patch, side - side % (2 * patch))
    per_frame = (height // patch) * (width // patch) // 4
    return -(-max_frames // temporal) * per_frame + TEXT_TOKENS


def auto_batch_size(free_bytes: int | None, config: Any, *, device: str, questions: int | None = None, prompt_tokens: int = 0,
                    max_new_tokens: int = 0, dtype_bytes: int = 2, max_batch: int = DEFAULT_MAX_AUTO_BATCH,
                    fraction: float = DEFAULT_MEMORY_FRACTION) -> BatchSizeChoice:
    """The ``--batch_size auto`` rule: 1 on CPU (or without a memory reading), the reference's batch size; on an
    accelerator the most rows of :func:`memory_model` that fit ``fraction * free_bytes``, between 1 and ``max_batch``,
    never more than ``questions`` when given."""
    if not device.startswith("cuda") or free_bytes is None:
        why = "CPU: auto means 1 (the reference's batch size)" if not device.startswith("cuda") else "no memory reading: 1"
        return BatchSizeChoice(AUTO, 1, why, {"device": device}, [[1, "chosen"]])
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1] (got {fraction})")
    memory = memory_model(config, dtype_bytes=dtype_bytes, prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens)
    row = memory.row_bytes()
    fits = int(free_bytes * fraction) // row
    size = max(1, min(max_batch, fits, questions if questions and questions > 0 else max_batch))
    inputs = {"device": device, "free_bytes": int(free_bytes), "fraction": fraction, "row_bytes": int(row),
              "kv_bytes_per_token": memory.kv_bytes_per_token, "prompt_tokens": prompt_tokens, "max_new_tokens": max_new_tokens,
              "max_batch": max_batch, "batch_bytes": memory.batch_bytes(size)}
    capped = f"; capped at {max_batch}" if fits > max_batch else ""
    why = f"{fraction:.0%} of {free_bytes / 2**30:.1f} GiB free at {row / 2**20:.0f} MiB per question: {fits} fit{capped}"
    return BatchSizeChoice(AUTO, size, why, inputs, [[size, "chosen"]])


__all__ = ["DEFAULT_MAX_AUTO_BATCH", "DEFAULT_MEMORY_FRACTION", "MemoryModel", "TEXT_TOKENS", "auto_batch_size", "memory_model",
           "prompt_tokens_estimate"]
