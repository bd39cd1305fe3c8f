"""Shared video prefix for the transformers backend: each video is prefilled once for all its questions.

Every question on a video renders to the same text up to the end of the video item (system turn,
user turn opening, the video's timestamps and patches) followed by the question. The vision tower
and the language model's prefill over that shared prefix are the bulk of a question's cost, so
:class:`SharedPrefixEngine` computes them once per video and answers all the video's questions from
the prefilled key/value cache, in batches that may span videos.

How a batch is decoded (the model's batch axis holds videos, a video's questions sit side by side along
the sequence axis, one 4-D mask keeps them apart, so each video's key/value prefix is held once, not once
per question; rotary positions as ``generate`` gives them at batch size 1; stop checks every few steps)
is :mod:`k9bench.inference.shared_decode`'s part. Each step's logits go through ``generate``'s own
logits processors (temperature, top-k/top-p, repetition penalty... from the generation config; none for
plain greedy decoding), then an argmax, or a draw when the config samples (seed it as ``generate`` is
seeded: ``torch.manual_seed`` before :meth:`SharedPrefixEngine.run`). Rows that produced a stop token
continue with the pad token, as ``generate`` does, until every row has stopped or ``max_new_tokens``
is reached.

Text-only requests (no frames) have no shared prefix here: each is a group of its own with its prompt
left-padded whole, so the same loop is plain batched generation.

Only what can be shown equal to ``model.generate`` runs here: the families whose row in
:data:`k9bench.models.families.FAMILIES` says ``shared_prefix`` (Qwen3-VL and Qwen2.5-VL), no
beam search, contrastive search, guidance, minimum lengths or stop strings (see
:func:`unsupported_reason`); anything else stays on ``generate``. Parity (token-identical greedy
answers to batch size 1 on CPU in float32, the tiny model, the demo set; with a repetition penalty
and n-gram ban too; sampling with top-k 1) is shown in ``tests/test_prefix_cache.py``; issue 22's cases
(a 300 s video with a two-word question, rows stopping at very different steps, batch sizes 1/7/24, for
Qwen2.5-VL and Qwen3-VL) in ``tests/test_fast_path_parity.py``; a model split across the CPU and disk in
``tests/test_device_map.py``. Sampled
answers are draws from the same distribution as ``generate``'s, not the same draws (as with
``generate``'s own batching); in bfloat16 on a GPU, as for ``generate``'s batching, near-tied
logits may resolve differently.

Integration (HF backend)::

    engine, why = SharedPrefixEngine.create_or_explain(model, processor, generation_config, stop_ids,
                                                       resize_in_processor=...)
    prepared = engine.prepare(requests, prompts)      # CPU only; may run on a worker thread
    outputs = engine.run(prepared)                     # on the model's devices; GenerationOutput per request, in order
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable

from k9bench.inference.backend import GenerationOutput, GenerationRequest
from k9bench.inference.pipeline import PerThread
from k9bench.inference.shared_decode import (DECODE_ATTENTION, DEFAULT_EOS_CHECK_EVERY, DEFAULT_PREFILL_ELEMENTS, DecodeRow,
                                             PrefixCacheError, PrefixState, SharedDecoder, model_input_device)
from k9bench.inference.shared_decode import prefill as prefill_prefix

log = logging.getLogger(__name__)

CACHE_KINDS = ("static",)
"""Key/value cache layouts of the decoding loop: ``static``, one preallocated cache per batch holding each
video's prefix once, written in place (the per-question ``dynamic`` layout of before is gone)."""

# Generation settings the loop does not reproduce, with the values at which they are inactive. Everything
# else that shapes the next token (temperature, top-k/top-p, repetition penalty, n-gram bans, suppressed
# or forced tokens...) goes through generate's own logits processors (model._get_logits_processor).
_UNSUPPORTED_SETTINGS: dict[str, tuple] = {
    "num_beams": (None, 1),
    "num_beam_groups": (None, 1),
    "penalty_alpha": (None,),
    "encoder_repetition_penalty": (None, 1.0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "min_length": (None, 0),
    "min_new_tokens": (None, 0),
    "guidance_scale": (None, 1.0),
    "stop_strings": (None,),
    "watermarking_config": (None,),
    "prompt_lookup_num_tokens": (None,),
    "assistant_early_exit": (None,),
}


def unsupported_reason(model: Any, generation_config: Any) -> str | None:
    """Why the shared-prefix engine cannot reproduce ``model.generate`` here, or None when it can."""
    from k9bench.models.families import shared_prefix_model_types

    model_type = getattr(getattr(model, "config", None), "model_type", None)
    supported = shared_prefix_model_types()  # the families' table: the rows with shared_prefix
    if model_type not in supported:
        return f"model type {model_type!r} is not one of {', '.join(supported)}"
    inner = getattr(model, "model", None)
    if inner is None or not callable(getattr(inner, "get_rope_index", None)):
        return f"{type(model).__name__} has no model.get_rope_index"
    if generation_config is None:
        return "no generation config"
    for key, inactive in _UNSUPPORTED_SETTINGS.items():
        value = getattr(generation_config, key, None)
        if value not in inactive:
            return f"generation setting {key}={value!r} is not reproduced by the shared-prefix loop"
    if not callable(getattr(model, "_get_logits_processor", None)):
        return f"{type(model).__name__} has no _get_logits_processor (generate's logits processors)"
    if not getattr(generation_config, "max_new_tokens", None):
        return "max_new_tokens is not set"
    if getattr(generation_config, "pad_token_id", None) is None:
        return "no pad_token_id"
    return None


def split_shared_prefix(prompts: list[str], special_tokens: Iterable[str], anchor: str | None = None) -> tuple[str, list[str]]:
    """``(prefix, suffixes)``: the prompts' longest common start, cut back to the end of a special token.

    Cutting right after a special token (``<|vision_end|>``, ``<|im_start|>``...) makes the split
    safe for the tokenizer: special tokens are matched before byte-pair merges, so tokenizing the
    prefix and each suffix apart gives the tokens of the whole prompt. Every suffix is non-empty:
    the cut lies at most at the end of the shortest prompt's last special token before its end.

    With ``anchor`` (the video's closing token, ``<|vision_end|>``) found in that common start, the
    cut is right after its last occurrence there instead: the prefix is then the same whether a video
    has one question in the batch or several, so a video split across batches reuses its prefill.
    """
    if not prompts:
        raise ValueError("no prompts")
    common = prompts[0]
    for p in prompts[1:]:
        n = 0
        limit = min(len(common), len(p))
        while n < limit and common[n] == p[n]:
            n += 1
        common = common[:n]
    shortest = min(len(p) for p in prompts)
    limit = min(len(common), shortest - 1)  # leave at least one character to each suffix
    if anchor:
        at = common.rfind(anchor, 0, limit + 1)
        while at >= 0 and at + len(anchor) > limit:
            at = common.rfind(anchor, 0, at)
        if at >= 0:
            return prompts[0][:at + len(anchor)], [p[at + len(anchor):] for p in prompts]
    cut = 0
    for token in special_tokens:
        if not token:
            continue
        at = common.rfind(token, 0, limit + 1)
        while at >= 0 and at + len(token) > limit:
            at = common.rfind(token, 0, at)
        if at >= 0:
            cut = max(cut, at + len(token))
    return prompts[0][:cut], [p[cut:] for p in prompts]


@dataclass
class PreparedVideo:
    """One video's prefix, processed on the CPU (tensors not yet on the device)."""

    key: str
    """Identifies the prefix (video, frames and prefix text); equal keys share one prefill."""
    prefix_text: str
    """The prompt text before the questions."""
    inputs: dict
    """The processor's output for the prefix (``input_ids``, ``pixel_values_videos``, grids...)."""

    @property
    def length(self) -> int:
        return int(self.inputs["input_ids"].shape[1])


@dataclass
class PreparedRow:
    """One question of a prepared batch."""

    request_index: int
    """Position of the request in the batch given to :meth:`SharedPrefixEngine.prepare`."""
    prompt: str
    """The whole rendered prompt (recorded as today)."""
    video_key: str | None
    """Key of its :class:`PreparedVideo` (None: no shared prefix)."""
    suffix_ids: list[int]
    """Token ids after the prefix (the whole prompt when there is no prefix)."""


@dataclass
class PreparedBatch:
    """What :meth:`SharedPrefixEngine.prepare` hands to :meth:`SharedPrefixEngine.run`."""

    rows: list[PreparedRow]
    videos: dict[str, PreparedVideo]
    prepare_seconds: float = 0.0
    """CPU time spent in ``prepare`` (processor, tokenizer)."""


@dataclass
class EngineStats:
    """Counters of the shared-prefix engine (for ``run_stats``)."""

    batches: int = 0
    questions: int = 0
    prefills: int = 0
    """Prefix prefills run (vision tower + language model over the prefix)."""
    prefix_reuses: int = 0
    """Batches that reused a prefix prefilled for an earlier batch (a video split across batches)."""
    prefix_tokens: int = 0
    """Tokens prefilled in prefixes, summed."""
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    """Suffix prefill and token-by-token decoding, summed."""
    prepare_seconds: float = 0.0
    generated_tokens: int = 0
    decode_steps: int = 0
    """Decoding steps run, summed over batches (stop checks every few steps: a few surplus pad steps per batch)."""
    prefix_copies: int = 0
    """Video prefixes copied into a batch's cache (one per video per batch, never one per question)."""
    peak_cache_bytes: int = 0
    """The largest batch key/value cache allocated."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:24]


def frames_key(request: GenerationRequest) -> str | None:
    """A key that is equal for requests over the same sampled frames (None without frames)."""
    f = request.frames
    if f is None:
        return None
    return _digest(request.video_path, f.num_frames, tuple(f.indices), f.height, f.width, f.decoder, f.total_frames, f.source_fps)


class SharedPrefixEngine:
    """Generation for Qwen-VL models with one prefill per video prefix, batches spanning videos (see the module doc)."""

    def __init__(self, model: Any, processor: Any, generation_config: Any, stop_ids: Iterable[int], *,
                 resize_in_processor: bool, keep_prefixes: int = 1, cache: str = "static",
                 eos_check_every: int = DEFAULT_EOS_CHECK_EVERY, prefill_elements: int | None = DEFAULT_PREFILL_ELEMENTS):
        if cache not in CACHE_KINDS:
            raise ValueError(f"cache {cache!r}: one of {', '.join(CACHE_KINDS)}")
        reason = unsupported_reason(model, generation_config)
        if reason is not None:
            raise PrefixCacheError(reason)
        self.model = model
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.generation_config = generation_config
        self.stop_ids = sorted(set(int(i) for i in stop_ids))
        self.pad_id = int(generation_config.pad_token_id)
        self.max_new_tokens = int(generation_config.max_new_tokens)
        self.do_sample = bool(getattr(generation_config, "do_sample", False))
        self.resize_in_processor = resize_in_processor
        self.keep_prefixes = keep_prefixes
        """Prefix states kept after a batch (the last videos of the batch, which may continue in the next one)."""
        self.cache_kind = cache
        """``static``: one cache per batch, preallocated for the prompts and ``max_new_tokens``, each video's
        prefix in it once, written in place (no copy of the whole cache per step)."""
        self.decoder = SharedDecoder(model, generation_config, self.stop_ids, eos_check_every=eos_check_every,
                                     prefill_elements=prefill_elements)
        """The device side (:mod:`k9bench.inference.shared_decode`): layout, cache, decoding loop."""
        self.stats = EngineStats()
        self._states: dict[str, PrefixState] = {}
        self._lock = threading.Lock()
        self._processors = PerThread(lambda: self.processor)
        self._split_checked = False
        special = list(getattr(self.tokenizer, "all_special_tokens", []) or [])
        added = getattr(self.tokenizer, "added_tokens_decoder", {}) or {}
        special += [str(t) for t in added.values() if getattr(t, "special", False)]
        self._special_tokens = sorted(set(special), key=len, reverse=True)
        end_id = getattr(model.config, "vision_end_token_id", None)
        self._anchor = self.tokenizer.convert_ids_to_tokens(end_id) if end_id is not None else None
        video_id = getattr(model.config, "video_token_id", None)
        self._video_token = self.tokenizer.convert_ids_to_tokens(video_id) if video_id is not None else None
        rope = model.model.get_rope_index
        self._rope_params = set(inspect.signature(rope).parameters)

    # ------------------------------------------------------------------ description

    def describe(self) -> dict[str, Any]:
        """What ran (for the artifact's ``inference.backend``)."""
        kernel = self.model.config.get_text_config()._attn_implementation
        return {
            "decoding": f"shared video prefix (one prefill per video, held once per batch for all its questions), "
                        f"{'sampling' if self.do_sample else 'greedy'}, {self.cache_kind} KV cache",
            "cache": self.cache_kind,
            "keep_prefixes": self.keep_prefixes,
            "eos_check_every": self.decoder.eos_check_every,
            "decode_attention": f"{DECODE_ATTENTION}: torch sdpa, grouped query heads packed, the engine's 4-D mask "
                                f"(the model's own {kernel} for the video prefill and for generate)",
            "position_rule": "generated tokens continue from the last prompt token's position + 1 (transformers 5's generate)",
        }

    # ------------------------------------------------------------------ CPU side

    def _processor(self) -> Any:
        """The processor for this thread: fast tokenizers refuse concurrent use ("Already borrowed"),
        so each worker thread that prepares batches gets its own copy (made once)."""
        return self._processors.get()

    def _processor_kwargs(self, request: GenerationRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "videos": [request.frames.video_tensor() if self.resize_in_processor else request.frames.frames],
            "video_metadata": [request.frames.processor_metadata()],
            "do_sample_frames": False,
        }
        if not self.resize_in_processor:
            kwargs["do_resize"] = False
        return kwargs

    def prepare(self, requests: list[GenerationRequest], prompts: list[str]) -> PreparedBatch:
        """Run the processor on each video's prefix and tokenize every question's suffix (CPU only).

        ``prompts`` are the rendered prompts (``backend.render_prompt(r.messages)``), in order.
        Safe to call from worker threads while :meth:`run` works (each thread uses its own processor copy).
        """
        t0 = time.perf_counter()
        processor = self._processor()
        if len(prompts) != len(requests):
            raise ValueError(f"{len(prompts)} prompts for {len(requests)} requests")
        with_frames = sum(r.frames is not None for r in requests)
        if with_frames not in (0, len(requests)):
            raise ValueError("a batch mixes requests with and without video")
        groups: dict[str | None, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(frames_key(r), []).append(i)
        rows: list[PreparedRow | None] = [None] * len(requests)
        videos: dict[str, PreparedVideo] = {}
        for fkey, members in groups.items():
            if fkey is None:
                encoded = processor.tokenizer([prompts[i] for i in members], add_special_tokens=False)["input_ids"]
                for i, ids in zip(members, encoded):
                    rows[i] = PreparedRow(i, prompts[i], None, list(ids))
                continue
            prefix, suffixes = split_shared_prefix([prompts[i] for i in members], self._special_tokens, self._anchor)
            if not prefix or (self._video_token and (self._video_token not in prefix or any(self._video_token in x for x in suffixes))):
                raise PrefixCacheError(f"request {requests[members[0]].key}: the video is not in the prompt's shared start")
            vkey = _digest(fkey, prefix)
            first = requests[members[0]]
            inputs = dict(processor(text=[prefix], return_tensors="pt", **self._processor_kwargs(first)))
            if int(inputs["input_ids"].shape[1]) == 0:
                raise PrefixCacheError("empty prefix")
            videos[vkey] = PreparedVideo(vkey, prefix, inputs)
            encoded = processor.tokenizer(suffixes, add_special_tokens=False)["input_ids"]
            for i, ids in zip(members, encoded):
                if not ids:
                    raise PrefixCacheError(f"request {requests[i].key}: nothing after the shared prefix")
                rows[i] = PreparedRow(i, prompts[i], vkey, list(ids))
            if not self._split_checked:
                self._check_split(processor, first, prompts[members[0]], inputs, rows[members[0]].suffix_ids)
        elapsed = time.perf_counter() - t0
        with self._lock:
            self.stats.prepare_seconds += elapsed
        return PreparedBatch(rows=[r for r in rows if r is not None], videos=videos, prepare_seconds=elapsed)

    def _check_split(self, processor: Any, request: GenerationRequest, prompt: str, prefix_inputs: dict, suffix_ids: list[int]) -> None:
        """Once per engine: the prefix and suffix tokens must be exactly the whole prompt's tokens."""
        whole = processor(text=[prompt], return_tensors="pt", **self._processor_kwargs(request))
        want = whole["input_ids"][0].tolist()
        have = prefix_inputs["input_ids"][0].tolist() + suffix_ids
        if want != have:
            raise PrefixCacheError("tokenizing the shared prefix and the question apart does not give the prompt's tokens "
                                   f"({len(have)} vs {len(want)} tokens)")
        self._split_checked = True

    # ------------------------------------------------------------------ device side

    def prefill(self, video: PreparedVideo) -> PrefixState:
        """Vision tower + language model over one video's prefix (batch 1, no padding)."""
        return prefill_prefix(self.model, video.key, video.inputs, self._rope_params)

    def _states_for(self, prepared: PreparedBatch) -> dict[str, PrefixState]:
        states: dict[str, PrefixState] = {}
        for vkey, video in prepared.videos.items():
            state = self._states.get(vkey)
            if state is not None:
                self.stats.prefix_reuses += 1
            else:
                t0 = time.perf_counter()
                state = self.prefill(video)
                self._sync()
                self.stats.prefill_seconds += time.perf_counter() - t0
                self.stats.prefills += 1
                self.stats.prefix_tokens += state.length
            states[vkey] = state
        return states

    def _sync(self) -> None:
        import torch

        device = model_input_device(self.model)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def release(self, video_key: str | None = None) -> None:
        """Drop kept prefix states (one, or all)."""
        if video_key is None:
            self._states.clear()
        else:
            self._states.pop(video_key, None)

    def run(self, prepared: PreparedBatch) -> list[GenerationOutput]:
        """Answer a prepared batch; one output per request, in request order."""
        import torch

        with torch.inference_mode():
            states = self._states_for(prepared)
            t0 = time.perf_counter()
            # one group per video (its questions share its prefix), one per text-only question
            groups: list[PrefixState | None] = []
            index: dict[str, int] = {}
            rows = []
            for r in prepared.rows:
                if r.video_key is None:
                    groups.append(None)
                    rows.append(DecodeRow(len(groups) - 1, r.suffix_ids))
                    continue
                if r.video_key not in index:
                    index[r.video_key] = len(groups)
                    groups.append(states[r.video_key])
                rows.append(DecodeRow(index[r.video_key], r.suffix_ids))
            result = self.decoder.decode(groups, rows)
            self._sync()
            self.stats.decode_seconds += time.perf_counter() - t0
        # keep the last videos' prefixes: a video split across batches continues in the next one
        order = list(index)
        keep = order[-self.keep_prefixes:] if self.keep_prefixes > 0 else []
        self._states = {k: states[k] for k in keep}
        self.stats.batches += 1
        self.stats.questions += len(prepared.rows)
        self.stats.decode_steps += result.steps
        self.stats.prefix_copies += len(index)
        self.stats.peak_cache_bytes = max(self.stats.peak_cache_bytes, result.cache_bytes)
        texts = self.processor.batch_decode(result.tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        outputs: list[GenerationOutput | None] = [None] * len(prepared.rows)
        for row, ids, stopped, text in zip(prepared.rows, result.tokens, result.stopped, texts):
            self.stats.generated_tokens += len(ids)
            prefix_len = states[row.video_key].length if row.video_key is not None else 0
            outputs[row.request_index] = GenerationOutput(
                text=text, prompt=row.prompt, num_input_tokens=prefix_len + len(row.suffix_ids), num_output_tokens=len(ids),
                finish_reason="stop" if stopped else "length",
            )
        return outputs  # type: ignore[return-value]

    # ------------------------------------------------------------------ convenience

    @classmethod
    def create_or_explain(cls, model: Any, processor: Any, generation_config: Any, stop_ids: Iterable[int], *,
                          resize_in_processor: bool, keep_prefixes: int = 1, cache: str = "static",
                          eos_check_every: int = DEFAULT_EOS_CHECK_EVERY) -> tuple["SharedPrefixEngine | None", str | None]:
        """``(engine, None)``, or ``(None, why)`` when this model or these settings must stay on ``generate``
        (the caller logs ``why`` and records it, e.g. under ``inference.backend.decoding``)."""
        try:
            return cls(model, processor, generation_config, stop_ids, resize_in_processor=resize_in_processor,
                       keep_prefixes=keep_prefixes, cache=cache, eos_check_every=eos_check_every), None
        except PrefixCacheError as exc:
            return None, str(exc)

    def generate(self, requests: list[GenerationRequest], prompts: list[str]) -> list[GenerationOutput]:
        """``prepare`` then ``run`` (no overlap)."""
        return self.run(self.prepare(requests, prompts))


__all__ = [
    "CACHE_KINDS", "EngineStats", "PrefixCacheError", "PrefixState", "PreparedBatch", "PreparedRow", "PreparedVideo",
    "SharedPrefixEngine", "frames_key", "split_shared_prefix", "unsupported_reason",
    "model_input_device",
]
