"""The device side of the shared-prefix engine (:mod:`k9bench.inference.prefix_cache`): prefill a video's
prefix once, then decode every question on it from ONE copy of that prefix.

How a batch is laid out (``B`` questions over ``G`` groups; a group is one video's questions, or one
text-only question)::

    model row g:  [prefix of video g (P_g) | pad ][slot 0 suffix | slot 1 suffix | ...][step 0: slot 0, slot 1, ...][step 1: ...]
                  <--------- P_max --------------><------------ R x S_max -----------><--------- R x max_new_tokens --------->

The model's batch dimension holds the groups, not the questions: a group's questions are *slots*
side by side along the sequence axis, each question's suffix left-padded to ``S_max`` inside its
slot, and every decoding step appends one column per slot. A 4-D boolean attention mask says who
sees what: a question's tokens see the group's prefix, its own earlier tokens and itself, never
another question's. The video's key/value prefix is therefore held once per video (copied once from
its prefill into the batch's preallocated :class:`transformers.StaticCache`), never once per
question, and nothing of the cache is copied per step (each step writes ``R`` columns in place).

Rotary positions are the ones ``generate`` gives the whole prompt at batch size 1: the prefix's
own (Qwen's 3-D multimodal rope, from ``get_rope_index``), the question's tokens one by one after the
prefix's last token, and generated tokens from the last prompt token's position + 1 onwards (the
rule of transformers 5: ``position_ids[..., -1:] + 1`` per step; 4.x continued from the prompt's
*largest* position + 1, which differs where a video's temporal positions run past the question's end,
as Qwen2.5-VL's scaled time axis does for a long video and a short question).

Stops: a row that produced a stop token continues with the pad token, as ``generate`` does; whether
every row has stopped is asked of the device only every ``eos_check_every`` steps (one host sync per
``k`` steps instead of per step); the surplus steps only append pads, and each row's tokens are cut
after its first stop token, so the tokens are the same as checking every step.

The attention kernel of these forwards is torch's scaled_dot_product_attention with the grouped
query heads packed onto their key/value head (:func:`grouped_sdpa`, registered with transformers as
:data:`DECODE_ATTENTION`): transformers' own sdpa would ``repeat_kv`` (copy every key and value once per
query head of its group) whenever a mask is given and more than one query token is in flight, which is
every step here. The mask is an arbitrary 4-D one, which flash_attention_2 cannot take: the language
model is switched to this kernel for the engine's forwards only, and back (recorded by ``describe``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    import torch

DEFAULT_EOS_CHECK_EVERY = 8
"""Decoding steps between two checks whether every row has stopped."""

CPU_PREFILL_ELEMENTS = 1 << 26
"""Budget of attention scores (groups x heads x query tokens x key columns) per suffix-prefill forward off a
GPU: the questions' suffixes are prefilled in chunks of slots under it (sdpa's math kernel materialises them)."""

DEFAULT_PREFILL_ELEMENTS: int | None = None
"""The engine's default budget: None, taken from the free memory on CUDA (:func:`prefill_budget`), else
:data:`CPU_PREFILL_ELEMENTS`. A number is used as given on every device."""

PREFILL_MEMORY_FRACTION = 0.5
"""Share of the free GPU memory (read after the batch cache is allocated) the suffix prefill's scores may take."""

SCORE_BYTES = 12
"""GPU bytes per attention score of the math kernel: the scores and their softmax in float32, and the mask."""


def prefill_budget(device: Any, given: int | None = None) -> int:
    """Attention scores a suffix-prefill forward may hold: ``given`` when set; on CUDA
    :data:`PREFILL_MEMORY_FRACTION` of the free memory (``torch.cuda.mem_get_info``) over :data:`SCORE_BYTES`,
    never below :data:`CPU_PREFILL_ELEMENTS`; elsewhere :data:`CPU_PREFILL_ELEMENTS`."""
    if given is not None:
        return int(given)
    if getattr(device, "type", str(device).split(":")[0]) != "cuda":
        return CPU_PREFILL_ELEMENTS
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    return max(CPU_PREFILL_ELEMENTS, int(free * PREFILL_MEMORY_FRACTION) // SCORE_BYTES)

DECODE_ATTENTION = "k9bench_grouped_sdpa"
"""The kernel of the engine's forwards (:func:`grouped_sdpa`, an arbitrary 4-D mask)."""

_PREFIX, _NOBODY = -1, -2
"""Owner codes of a cache column besides a slot number: the group's prefix (seen by all its slots), padding."""


class PrefixCacheError(RuntimeError):
    """The shared-prefix path cannot answer this batch (the caller falls back to ``generate``)."""


@dataclass
class PrefixState:
    """A video's prefilled key/value cache (on the model's devices), batch 1."""

    key: str
    keys: list
    """Per layer, a (1, kv_heads, P, head_dim) tensor."""
    values: list
    length: int
    """P: prefix tokens."""
    next_position: int
    """Rotary position of the first token after the prefix (the last prefix token is text: one position for all axes)."""
    max_position: int
    """Largest rotary position inside the prefix (a video's temporal axis can run past the text)."""
    input_ids: Any = None
    """The prefix's token ids (1, P), for logits processors that look at the sequence (repetition penalty)."""

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


@dataclass
class DecodeRow:
    """One question of a batch for :meth:`SharedDecoder.decode`."""

    group: int
    """Index into the batch's groups (rows of one group share its prefix)."""
    suffix_ids: list[int]
    """Token ids after the prefix (the whole prompt without a prefix)."""


@dataclass
class DecodeResult:
    """What :meth:`SharedDecoder.decode` produced."""

    tokens: list[list[int]]
    """Per row, the new tokens up to and including its first stop token (or ``max_new_tokens`` of them)."""
    stopped: list[bool]
    steps: int
    """Decoding steps run (a multiple of the EOS check interval, or ``max_new_tokens``)."""
    cache_bytes: int
    """Bytes of the batch's key/value cache."""


def model_input_device(model: Any) -> "torch.device":
    """Where a model's inputs go: its embedding's device (a model split across devices by a device map
    takes its inputs there; accelerate's hooks move activations between the parts)."""
    import torch

    emb = model.get_input_embeddings()
    for p in emb.parameters():
        if p.device.type != "meta":
            return p.device
    hook = getattr(emb, "_hf_hook", None)
    device = getattr(hook, "execution_device", None)
    if device is not None:
        return torch.device(device if not isinstance(device, int) else f"cuda:{device}")
    return torch.device("cpu")


def grouped_sdpa(module: Any, query: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor", attention_mask: Any,
                 dropout: float = 0.0, scaling: float | None = None, **kwargs: Any) -> tuple["torch.Tensor", None]:
    """Attention as transformers' sdpa computes it, with each key/value head's query heads stacked along the
    query axis (``(B, H_kv, groups x Q, D)`` against the cache's ``(B, H_kv, K, D)``): no per-step copy of
    the keys and values. A mask narrower than the cache limits the keys to its columns (the preallocated cache's
    unwritten columns cost nothing). Returns ``(B, Q, H, D)`` as transformers' attention functions do."""
    import torch

    batch, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    if attention_mask is not None:
        # a mask narrower than the cache: the columns after it are not written yet (views, no copy)
        width = min(attention_mask.shape[-1], key.shape[-2])
        key, value, attention_mask = key[:, :, :width], value[:, :, :width], attention_mask[..., :width]
    if groups > 1:
        query = query.reshape(batch, kv_heads, groups * q_len, dim)
        if attention_mask is not None:
            mask = attention_mask
            attention_mask = mask[:, :, None].expand(mask.shape[0], mask.shape[1], groups, q_len, mask.shape[-1]).reshape(
                mask.shape[0], mask.shape[1], groups * q_len, mask.shape[-1])
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=0.0, scale=scaling)
    return out.reshape(batch, heads, q_len, dim).transpose(1, 2).contiguous(), None


def _register_kernel() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(DECODE_ATTENTION, grouped_sdpa)


@contextlib.contextmanager
def attention_kernel(model: Any, kernel: str = DECODE_ATTENTION) -> Iterator[str]:
    """Run the language model's attention with ``kernel`` inside the block (restored after); yields the
    kernel it had."""
    if kernel == DECODE_ATTENTION:
        _register_kernel()
    config = model.config.get_text_config()
    before = config._attn_implementation
    if before == kernel:
        yield before
        return
    config._attn_implementation = kernel
    try:
        yield before
    finally:
        config._attn_implementation = before


def prefill(model: Any, key: str, inputs: dict, rope_params: set[str]) -> PrefixState:
    """Vision tower + language model over one video's prefix (batch 1, no padding; ``inputs``: the
    processor's output, on the CPU)."""
    import torch

    device = model_input_device(model)
    dtype = model.dtype
    moved = {}
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor):
            v = v.to(device)
            if k in ("pixel_values_videos", "pixel_values") and v.is_floating_point():
                v = v.to(dtype)
        moved[k] = v
    ids = moved["input_ids"]
    length = int(ids.shape[1])
    rope_pos, _ = model.model.get_rope_index(ids, **{k: v for k, v in moved.items() if k in rope_params and k != "input_ids"})
    text_pos = torch.arange(length, device=device).view(1, 1, -1)
    position_ids = torch.cat([text_pos, rope_pos.to(device)], dim=0)
    forward = {k: v for k, v in moved.items() if k != "attention_mask"}
    out = model(**forward, attention_mask=moved.get("attention_mask"), position_ids=position_ids, use_cache=True, logits_to_keep=1)
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = out.past_key_values
    last = rope_pos[:, 0, -1]
    if not bool((last == last[0]).all()):
        raise PrefixCacheError("the shared prefix does not end with a text token")
    return PrefixState(key, [layer.keys for layer in cache.layers], [layer.values for layer in cache.layers], length,
                       int(last[0]) + 1, int(rope_pos.max()), ids)


class SharedDecoder:
    """Greedy (or sampled) decoding of a batch of questions over shared prefixes (see the module doc)."""

    def __init__(self, model: Any, generation_config: Any, stop_ids: list[int], *, eos_check_every: int = DEFAULT_EOS_CHECK_EVERY,
                 prefill_elements: int | None = DEFAULT_PREFILL_ELEMENTS):
        if eos_check_every < 1:
            raise ValueError("eos_check_every must be at least 1")
        self.model = model
        self.generation_config = generation_config
        self.stop_ids = sorted(set(int(i) for i in stop_ids))
        self.pad_id = int(generation_config.pad_token_id)
        self.max_new_tokens = int(generation_config.max_new_tokens)
        self.do_sample = bool(getattr(generation_config, "do_sample", False))
        self.eos_check_every = eos_check_every
        self.prefill_elements = prefill_elements
        """Scores per suffix-prefill forward (None: :func:`prefill_budget` of the device at each batch)."""
        self.last_prefill_chunk: int | None = None
        """Slots per suffix-prefill forward in the last batch (for tests and stats)."""
        self.heads = int(getattr(model.config.get_text_config(), "num_attention_heads", 1) or 1)

    def decode(self, groups: list[PrefixState | None], rows: list[DecodeRow]) -> DecodeResult:
        """Every row's new tokens (see :class:`DecodeResult`); ``groups[g]`` is group g's prefix (None: none)."""
        import torch

        device = model_input_device(self.model)
        n_groups, batch, new = len(groups), len(rows), self.max_new_tokens
        slot = []
        count = [0] * n_groups
        for r in rows:
            slot.append(count[r.group])
            count[r.group] += 1
        slots = max(count)
        p_max = max((g.length for g in groups if g is not None), default=0)
        s_max = max(len(r.suffix_ids) for r in rows)
        base = p_max + slots * s_max  # first decoding column
        width = base + slots * new

        # who owns each cache column; the rotary/text positions and ids of every prompt column
        owner = torch.full((n_groups, width), _NOBODY, dtype=torch.long)
        ids = torch.full((n_groups, slots * s_max), self.pad_id, dtype=torch.long)
        rope = torch.zeros((n_groups, slots * s_max), dtype=torch.long)
        text = torch.zeros((n_groups, slots * s_max), dtype=torch.long)
        step_rope = torch.zeros((n_groups, slots), dtype=torch.long)
        step_text = torch.zeros((n_groups, slots), dtype=torch.long)
        for g, st in enumerate(groups):
            if st is not None:
                owner[g, :st.length] = _PREFIX
        for b, r in enumerate(rows):
            g, s, n = r.group, slot[b], len(r.suffix_ids)
            st = groups[g]
            p, nxt = (st.length, st.next_position) if st is not None else (0, 0)
            start = s * s_max + s_max - n
            ids[g, start:start + n] = torch.tensor(r.suffix_ids, dtype=torch.long)
            owner[g, p_max + start:p_max + start + n] = s
            owner[g, base + s::slots] = s
            rope[g, start:start + n] = torch.arange(nxt, nxt + n)
            text[g, start:start + n] = torch.arange(p, p + n)
            step_rope[g, s] = nxt + n  # generate's rule: the last prompt token's position + 1
            step_text[g, s] = p + n
        owner, ids, rope, text = owner.to(device), ids.to(device), rope.to(device), text.to(device)
        step_rope, step_text = step_rope.to(device), step_text.to(device)
        row_group = torch.tensor([r.group for r in rows], dtype=torch.long, device=device)
        row_slot = torch.tensor(slot, dtype=torch.long, device=device)
        columns = torch.arange(width, device=device)

        def mask(query_cols: "torch.Tensor", query_slot: "torch.Tensor", extent: int) -> "torch.Tensor":
            """(G, 1, Q, extent): the prefix, the own slot's columns up to the query's, and the query itself.
            ``extent`` is one past the last column written so far: the kernel attends to those columns only."""
            cols, own_cols = columns[None, None, :extent], owner[:, None, :extent]
            own = own_cols == query_slot[:, :, None]
            seen = (own_cols == _PREFIX) | (own & (cols <= query_cols[None, :, None]))
            return (seen | (cols == query_cols[None, :, None]))[:, None]

        cache = self._cache(groups, n_groups, p_max, width)
        processors = self._logits_processors(p_max + s_max)
        sequence = self._sequence(groups, rows, p_max + s_max, new, device) if len(processors) else None
        with attention_kernel(self.model):
            scores = self._prefill_suffixes(ids, rope, text, owner, mask, slots, s_max, p_max, cache, row_group, row_slot)
            tokens = torch.full((batch, new), self.pad_id, dtype=torch.long, device=device)
            finished = torch.zeros(batch, dtype=torch.bool, device=device)
            stop = torch.tensor(self.stop_ids, dtype=torch.long, device=device)
            slot_ids = torch.arange(slots, device=device)[None, :].expand(n_groups, -1)
            steps = 0
            for step in range(new):
                scores = scores.float()
                if sequence is not None:
                    scores = processors(sequence[:, :p_max + s_max + step], scores)
                if self.do_sample:
                    token = torch.multinomial(torch.nn.functional.softmax(scores, dim=-1), num_samples=1).squeeze(1)
                else:
                    token = scores.argmax(-1)
                token = torch.where(finished, torch.full_like(token, self.pad_id), token)
                tokens[:, step] = token
                if sequence is not None:
                    sequence[:, p_max + s_max + step] = token
                finished |= torch.isin(token, stop)
                steps = step + 1
                if steps == new or (steps % self.eos_check_every == 0 and bool(finished.all())):
                    break
                step_ids = torch.full((n_groups, slots), self.pad_id, dtype=torch.long, device=device)
                step_ids[row_group, row_slot] = token
                cols = base + step * slots + torch.arange(slots, device=device)
                pos = torch.stack([step_text + step, step_rope + step, step_rope + step, step_rope + step])
                step_mask = mask(cols, slot_ids, base + (step + 1) * slots)
                out = self.model(input_ids=step_ids, attention_mask=step_mask, position_ids=pos, cache=cache, use_cache=True,
                                 logits_to_keep=0)
                scores = out.logits[row_group.to(out.logits.device), row_slot.to(out.logits.device)].to(device)
        produced = tokens[:, :steps].cpu().tolist()
        stop_set = set(self.stop_ids)
        kept, stopped = [], []
        for ids_row in produced:
            at = next((i for i, t in enumerate(ids_row) if t in stop_set), None)
            kept.append(ids_row[:at + 1] if at is not None else ids_row)
            stopped.append(at is not None)
        cache_bytes = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
                          if getattr(layer, "is_initialized", False))
        return DecodeResult(kept, stopped, steps, cache_bytes)

    def _prefill_suffixes(self, ids, rope, text, owner, mask, slots, s_max, p_max, cache, row_group, row_slot) -> "torch.Tensor":
        """The questions' suffixes through the model, in chunks of slots; the (B, vocab) logits of each row's last token."""
        import torch

        device = ids.device
        n_groups, width = owner.shape
        per_slot = n_groups * self.heads * s_max * width
        chunk = max(1, min(slots, prefill_budget(device, self.prefill_elements) // max(1, per_slot)))
        self.last_prefill_chunk = chunk
        last: list["torch.Tensor"] = []
        for first in range(0, slots, chunk):
            stop = min(slots, first + chunk)
            lo, hi = first * s_max, stop * s_max
            cols = p_max + torch.arange(lo, hi, device=device)
            query_slot = (torch.arange(lo, hi, device=device) // s_max)[None, :].expand(n_groups, -1)
            pos = torch.stack([text[:, lo:hi], rope[:, lo:hi], rope[:, lo:hi], rope[:, lo:hi]])
            keep = torch.arange(stop - first, device=device) * s_max + s_max - 1
            out = self.model(input_ids=ids[:, lo:hi], attention_mask=mask(cols, query_slot, p_max + hi), position_ids=pos, cache=cache,
                             use_cache=True, logits_to_keep=keep)
            last.append(out.logits.to(device))
        logits = torch.cat(last, dim=1)  # (G, slots, vocab)
        return logits[row_group, row_slot]

    def _cache(self, groups: list[PrefixState | None], n_groups: int, p_max: int, width: int) -> Any:
        """The batch's preallocated cache, each group's prefix copied in once (columns 0..P_g)."""
        from transformers import StaticCache

        cache = StaticCache(config=self.model.config, max_cache_len=width)
        first = next((g for g in groups if g is not None), None)
        if first is None:
            return cache
        for i, layer in enumerate(cache.layers):
            k0, v0 = first.keys[i], first.values[i]
            layer.lazy_initialization(k0.new_empty((n_groups, k0.shape[1], 0, k0.shape[3])),
                                      v0.new_empty((n_groups, v0.shape[1], 0, v0.shape[3])))
            for g, st in enumerate(groups):
                if st is not None:
                    layer.keys[g, :, :st.length] = st.keys[i][0]
                    layer.values[g, :, :st.length] = st.values[i][0]
            layer.cumulative_length.fill_(p_max)
        return cache

    def _logits_processors(self, prompt_width: int) -> Any:
        """generate's own logits processors for these settings (temperature, top-k/p, penalties...)."""
        return self.model._get_logits_processor(generation_config=self.generation_config, input_ids_seq_length=prompt_width,
                                                encoder_input_ids=None, prefix_allowed_tokens_fn=None, logits_processor=None,
                                                device=model_input_device(self.model), model_kwargs={})

    def _sequence(self, groups: list[PrefixState | None], rows: list[DecodeRow], prompt_width: int, new: int,
                  device: Any) -> "torch.Tensor":
        """(B, prompt_width + new) token ids for the logits processors: each row's prompt (prefix and suffix)
        right-aligned after pad ids, as a left-padded batch of ``generate`` holds it; generated tokens are
        written after it in place."""
        import torch

        seq = torch.full((len(rows), prompt_width + new), self.pad_id, dtype=torch.long)
        for b, r in enumerate(rows):
            st = groups[r.group]
            prompt = (st.input_ids[0].tolist() if st is not None else []) + list(r.suffix_ids)
            seq[b, prompt_width - len(prompt):prompt_width] = torch.tensor(prompt, dtype=torch.long)
        return seq.to(device)


__all__ = ["CPU_PREFILL_ELEMENTS", "DECODE_ATTENTION", "DEFAULT_EOS_CHECK_EVERY", "DEFAULT_PREFILL_ELEMENTS", "DecodeResult", "DecodeRow",
           "PrefixCacheError", "PrefixState", "SharedDecoder", "attention_kernel", "grouped_sdpa", "model_input_device", "prefill", "prefill_budget"]
