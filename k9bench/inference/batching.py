"""Batch planning for the inference loop: batches of questions that may span videos, and ``--batch_size auto``.

Pure functions, no torch: :func:`plan_batches` turns the questions (grouped by video, in order) into
batches of at most ``batch_size`` questions. A video's questions stay next to each other (its frames
and its prefilled prefix serve them all); a batch holds whole videos as long as they fit and a video
is split only at a batch boundary (the engine keeps the prefix of a batch's last video for the next
batch, so a split costs no second prefill). With per-video token estimates the videos are ordered,
inside windows of ``window`` videos, longest first, so that videos of similar prompt length share a
batch (less padding) and the largest batch comes first (an out-of-memory error shows at once).
Every :class:`PlannedBatch` says which videos end with it (``release``): their frames and prefix can
be dropped once it is done.

:func:`auto_batch_size` is the ``--batch_size auto`` rule: the largest batch whose key/value cache
and working memory fit the free accelerator memory, with a safety margin; :func:`halve_batch_size` is
the step after an out-of-memory error; :class:`BatchSizeChoice` records what was used and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

AUTO = "auto"
"""The ``--batch_size`` value that asks for :func:`auto_batch_size`."""

DEFAULT_MAX_AUTO_BATCH = 256
"""Upper bound of an automatic batch size; below it the free memory decides. While decoding is bound by
the host's kernel launches (about 2,400 per step for a 36-layer model), each doubling of the batch about
halves the decoding time per question."""

DEFAULT_MEMORY_FRACTION = 0.85
"""Share of the free accelerator memory an automatic batch may plan to use."""


@dataclass(frozen=True)
class BatchPart:
    """A run of consecutive questions of one video inside a batch."""

    group: int
    """Index of the video in the list given to :func:`plan_batches`."""
    start: int
    """First question (index into that video's questions)."""
    stop: int
    """One past the last question."""

    @property
    def size(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class PlannedBatch:
    """One batch: parts of one or more videos, and the videos whose last question it holds."""

    parts: tuple[BatchPart, ...]
    release: tuple[int, ...]
    """Videos (group indices) that have no question left after this batch."""

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def groups(self) -> tuple[int, ...]:
        return tuple(p.group for p in self.parts)


def video_order(costs: Sequence[float | None], window: int | None = None) -> list[int]:
    """Group indices in processing order: longest estimated prompt first inside each window.

    Videos without an estimate (None) keep their place relative to each other at the end of their
    window. ``window`` None or 0: one window over all videos. The order is stable.
    """
    n = len(costs)
    size = n if not window or window <= 0 else window
    order: list[int] = []
    for start in range(0, n, max(size, 1)):
        chunk = list(range(start, min(n, start + size)))
        known = [i for i in chunk if costs[i] is not None]
        unknown = [i for i in chunk if costs[i] is None]
        known.sort(key=lambda i: -float(costs[i]))  # type: ignore[arg-type]
        order.extend(known + unknown)
    return order


def plan_batches(sizes: Sequence[int], batch_size: int, *, costs: Sequence[float | None] | None = None,
                 window: int | None = None) -> list[PlannedBatch]:
    """Pack the questions of each video (``sizes[g]`` questions for video ``g``) into batches.

    Batches hold at most ``batch_size`` questions and are filled up: a video that does not fit in
    what is left of a batch is split there and continues in the next batch. Videos with no
    questions are skipped. ``costs`` (estimated prompt tokens per video) reorders videos inside
    windows (see :func:`video_order`); without it the given order is kept.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
    if costs is not None and len(costs) != len(sizes):
        raise ValueError(f"{len(costs)} costs for {len(sizes)} videos")
    for g, n in enumerate(sizes):
        if n < 0:
            raise ValueError(f"video {g}: negative question count {n}")
    order = video_order(costs, window) if costs is not None else list(range(len(sizes)))
    batches: list[PlannedBatch] = []
    parts: list[BatchPart] = []
    release: list[int] = []
    room = batch_size
    for g in order:
        start = 0
        while start < sizes[g]:
            take = min(room, sizes[g] - start)
            parts.append(BatchPart(g, start, start + take))
            start += take
            room -= take
            if start == sizes[g]:
                release.append(g)
            if room == 0:
                batches.append(PlannedBatch(tuple(parts), tuple(release)))
                parts, release, room = [], [], batch_size
    if parts:
        batches.append(PlannedBatch(tuple(parts), tuple(release)))
    return batches


def estimate_video_tokens(num_frames: int, height: int, width: int, patch_size: int, *, merge_size: int = 2,
                          temporal_patch_size: int = 2, text_tokens: int = 0) -> int:
    """Language-model tokens of a video item (Qwen-VL: one token per merged patch per temporal pair),
    plus ``text_tokens`` (system turn, timestamps, question)."""
    if min(num_frames, height, width, patch_size) <= 0:
        raise ValueError("frames, size and patch size must be positive")
    t = -(-num_frames // temporal_patch_size)
    per_frame = (height // patch_size) * (width // patch_size) // (merge_size * merge_size)
    return t * per_frame + text_tokens


@dataclass(frozen=True)
class MemoryModel:
    """What a batch needs in accelerator memory (bytes), as the shared-prefix engine lays it out.

    The engine's batch cache holds one row per video (its prefix once, then a slot per question for the
    question's suffix and its generated tokens), and each video's own prefix cache is kept beside it
    while the batch decodes; the prefix kept for the next batch (``kept_prefixes``) too. So a batch of
    ``B`` questions over ``G`` videos holds ``2 * G * prefix + kept * prefix + B * (suffix + new)`` tokens
    of keys and values (:meth:`batch_bytes`)."""

    kv_bytes_per_token: int
    """Key/value cache per token for the whole language model: 2 * layers * kv_heads * head_dim * dtype bytes."""
    prompt_tokens: int
    """Estimated prompt tokens of a question (video + text): the shared prefix plus its own suffix."""
    max_new_tokens: int
    batch_overhead_bytes: int = 0
    """Per batch, independent of its size: the prefix prefill's working memory (vision tower, activations)."""
    row_overhead_bytes: int = 0
    """Per row besides its cache (logits, decode activations)."""
    suffix_tokens: int = 0
    """Of :attr:`prompt_tokens`, those of the question's own suffix (not shared with the video's other questions)."""
    questions_per_video: float = 1.0
    """Average questions per video: a batch of ``B`` questions spans about ``B / questions_per_video`` videos."""
    kept_prefixes: int = 1
    """Prefix caches kept from the previous batch (its last video may continue in this one)."""

    @property
    def prefix_tokens(self) -> int:
        return max(0, self.prompt_tokens - self.suffix_tokens)

    def videos_in(self, batch: int) -> int:
        """Most videos a batch of ``batch`` questions spans (whole videos, plus one split at each end)."""
        q = max(1.0, float(self.questions_per_video))
        return int(min(batch, -(-batch // q) + 1)) if batch > 0 else 0

    def batch_bytes(self, batch: int) -> int:
        """Accelerator bytes a batch of ``batch`` questions needs: every video's prefix counted once in the
        batch cache and once as its kept prefix cache, each question's suffix and new tokens, the overheads."""
        kv = self.kv_bytes_per_token
        tokens = (2 * self.videos_in(batch) + self.kept_prefixes) * self.prefix_tokens
        tokens += batch * (self.suffix_tokens + self.max_new_tokens)
        return kv * tokens + batch * self.row_overhead_bytes + self.batch_overhead_bytes

    def row_bytes(self) -> int:
        """Bytes one more question costs on average (its share of its video's two prefix copies, its own tokens)."""
        q = max(1.0, float(self.questions_per_video))
        per_row = 2 * self.prefix_tokens / q + self.suffix_tokens + self.max_new_tokens
        return int(self.kv_bytes_per_token * per_row) + self.row_overhead_bytes


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Key and value bytes one token occupies across all layers."""
    return 2 * num_layers * num_kv_heads * head_dim * dtype_bytes


@dataclass
class BatchSizeChoice:
    """The batch size in use and how it was reached (recorded in the artifact)."""

    requested: str
    """``auto`` or the number given."""
    batch_size: int
    """The size in use now."""
    reason: str
    """Why this size (the memory arithmetic, or ``given``)."""
    inputs: dict = field(default_factory=dict)
    """The figures the rule used (free bytes, bytes per row...)."""
    history: list = field(default_factory=list)
    """``[size, event]`` pairs: the first choice, then each halving after an out-of-memory error."""

    def halve(self, why: str = "out of memory") -> int:
        """Halve after an out-of-memory error (never below 1); returns the new size."""
        self.batch_size = halve_batch_size(self.batch_size)
        self.history.append([self.batch_size, why])
        return self.batch_size

    def to_dict(self) -> dict[str, Any]:
        return {"requested": self.requested, "batch_size": self.batch_size, "reason": self.reason,
                "inputs": dict(self.inputs), "history": [list(h) for h in self.history]}


def parse_batch_size(text: str | int) -> int | str:
    """A ``--batch_size`` value: a positive integer, or ``auto``. Raises ``ValueError`` with the reason."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        word = str(text).strip().lower()
        if word == AUTO:
            return AUTO
        try:
            value = int(word)
        except ValueError:
            raise ValueError(f"{text!r} is not a positive integer or 'auto'") from None
    if value < 1:
        raise ValueError(f"{text!r}: the batch size must be >= 1 (or 'auto')")
    return value


def halve_batch_size(size: int) -> int:
    """The batch size to retry with after an out-of-memory error."""
    return max(1, size // 2)


def auto_batch_size(free_bytes: int | None, memory: MemoryModel | None, *, device: str, questions: int | None = None,
                    max_batch: int = DEFAULT_MAX_AUTO_BATCH, fraction: float = DEFAULT_MEMORY_FRACTION) -> BatchSizeChoice:
    """The ``--batch_size auto`` rule.

    On CPU (or without a memory reading) the answer is 1, the reference's batch size. On an
    accelerator: the largest batch whose :meth:`MemoryModel.batch_bytes` fit ``fraction * free_bytes``,
    between 1 and ``max_batch``, and never more than ``questions`` when given.
    """
    if not device.startswith("cuda") or free_bytes is None or memory is None:
        why = "CPU: auto means 1 (the reference's batch size)" if not device.startswith("cuda") else "no memory reading: 1"
        choice = BatchSizeChoice(AUTO, 1, why, {"device": device})
        choice.history.append([1, "chosen"])
        return choice
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1] (got {fraction})")
    row = memory.row_bytes()
    usable = int(free_bytes * fraction)
    lo, hi = 0, max(1, max_batch)  # the largest batch in [1, max_batch] whose batch_bytes fit (it grows with the batch)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if memory.batch_bytes(mid) <= usable:
            lo = mid
        else:
            hi = mid - 1
    fits = lo
    size = int(max(1, min(max_batch, fits)))
    if questions is not None and questions > 0:
        size = min(size, questions)
    inputs = {"device": device, "free_bytes": int(free_bytes), "fraction": fraction, "row_bytes": int(row),
              "batch_overhead_bytes": int(memory.batch_overhead_bytes), "kv_bytes_per_token": memory.kv_bytes_per_token,
              "prompt_tokens": memory.prompt_tokens, "suffix_tokens": memory.suffix_tokens,
              "questions_per_video": round(float(memory.questions_per_video), 3), "kept_prefixes": memory.kept_prefixes,
              "max_new_tokens": memory.max_new_tokens, "max_batch": max_batch, "batch_bytes": int(memory.batch_bytes(size))}
    capped = f"; capped at {max_batch}" if fits >= max_batch else ""
    why = (f"{fraction:.0%} of {free_bytes / 2**30:.1f} GiB free, less {memory.batch_overhead_bytes / 2**30:.2f} GiB per batch, "
           f"at {row / 2**20:.0f} MiB per question ({memory.questions_per_video:.1f} questions per video, each video's prefix "
           f"in the batch cache and kept beside it): {int(fits)} fit{capped}")
    choice = BatchSizeChoice(AUTO, size, why, inputs)
    choice.history.append([size, "chosen"])
    return choice


def given_batch_size(size: int) -> BatchSizeChoice:
    """A ``--batch_size N`` given on the command line (halved on out-of-memory like an automatic one)."""
    if size < 1:
        raise ValueError(f"batch_size must be >= 1 (got {size})")
    return BatchSizeChoice(str(size), size, "given", {}, [[size, "given"]])


def memory_model_for(config: Any, *, dtype_bytes: int, prompt_tokens: int, max_new_tokens: int,
                     prefill_tokens: int | None = None, suffix_tokens: int = 0, questions_per_video: float = 1.0,
                     kept_prefixes: int = 1) -> MemoryModel:
    """A :class:`MemoryModel` from a transformers config (``text_config`` when it has one).

    The per-batch overhead counts the prefix prefill of one video (``prefill_tokens``, default the
    prompt): attention scores of the math kernel (heads x tokens^2 x 4 bytes) and the MLP's
    activations (tokens x intermediate x 3 x dtype bytes); the per-row overhead counts the logits of
    one position in float32 twice.
    """
    text = getattr(config, "text_config", None) or config
    layers = int(text.num_hidden_layers)
    heads = int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    vocab = int(text.vocab_size)
    tokens = prefill_tokens or prompt_tokens
    overhead = heads * tokens * tokens * 4 + tokens * int(text.intermediate_size) * 3 * dtype_bytes
    return MemoryModel(
        kv_bytes_per_token=kv_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes),
        prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
        batch_overhead_bytes=int(overhead), row_overhead_bytes=2 * vocab * 4,
        suffix_tokens=suffix_tokens, questions_per_video=questions_per_video, kept_prefixes=kept_prefixes,
    )


__all__ = [
    "AUTO", "BatchPart", "BatchSizeChoice", "DEFAULT_MAX_AUTO_BATCH", "DEFAULT_MEMORY_FRACTION", "MemoryModel", "PlannedBatch",
    "auto_batch_size", "estimate_video_tokens", "given_batch_size", "halve_batch_size", "kv_bytes_per_token",
    "memory_model_for", "parse_batch_size", "plan_batches", "video_order",
]
