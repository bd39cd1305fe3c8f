"""Shared video prefix for the transformers backend: each video is prefilled once for all its questions.

Every question on a video renders to the same text up to the end of the video item (system turn,
user turn opening, the video's timestamps and patches) followed by the question. The vision tower
and the language model's prefill over that shared prefix are the bulk of a question's cost, so
:class:`SharedPrefixEngine` computes them once per video and answers all the video's questions from
the prefilled key/value cache, in batches that may span videos.

How a batch is laid out (``B`` questions over ``V`` videos)::

    row b:  [zeros .. prefix of its video (P_v) ][pads .. question suffix (S_b)] [generated ...]
             <------------ P_max ---------------><----------- S_max ---------->

The prefix caches (one forward per video, batch 1, no padding) are right-aligned into one cache of
``P_max`` positions; the suffixes are left-padded to ``S_max``, so every row's last prompt token sits
in the same column and decoding appends one column per step. The 2-D attention mask hides the
zeros and pads; the rotary positions are the ones the full prompt would have had: Qwen's multimodal
rope gives the prefix its 3-D positions (``get_rope_index``), the question's tokens continue one by
one after the prefix's last token, and generated tokens follow ``generate``'s rule (the prompt's
largest position + 1, + 1 per step: the two differ only where a video's temporal positions run past
the question's end, as Qwen2.5-VL's scaled time axis can). Each step's logits go through ``generate``'s
own logits processors (temperature, top-k/top-p, repetition penalty... from the generation config;
none for plain greedy decoding), then an argmax, or a draw when the config samples (seed it as
``generate`` is seeded: ``torch.manual_seed`` before :meth:`SharedPrefixEngine.run`). Rows that
produced a stop token continue with the pad token, as ``generate`` does, until every row has stopped
or ``max_new_tokens`` is reached.

Text-only requests (no frames) have no shared prefix here: their prompts are left-padded whole,
so the same loop is plain batched generation.

Only what can be shown equal to ``model.generate`` runs here: Qwen3-VL and Qwen2.5-VL models, no
beam search, contrastive search, guidance, minimum lengths or stop strings (see
:func:`unsupported_reason`); anything else stays on ``generate``. Parity (token-identical greedy
answers to batch size 1 on CPU in float32, the tiny model, the demo set; with a repetition penalty
and n-gram ban too; sampling with top-k 1) is shown in ``tests/test_prefix_cache.py``. Sampled
answers are draws from the same distribution as ``generate``'s, not the same draws (as with
``generate``'s own batching); in bfloat16 on a GPU, as for ``generate``'s batching, near-tied
logits may resolve differently.

Integration (HF backend)::

    engine, why = SharedPrefixEngine.create_or_explain(model, processor, generation_config, stop_ids,
                                                       resize_in_processor=..., cache="dynamic")
    prepared = engine.prepare(requests, prompts)      # CPU only; may run on a worker thread
    outputs = engine.run(prepared)                     # on the model's device; GenerationOutput per request, in order
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from k9bench.inference.backend import GenerationOutput, GenerationRequest
from k9bench.inference.pipeline import PerThread

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

CACHE_KINDS = ("dynamic", "static")
"""Key/value cache layouts of the decoding loop (see :attr:`SharedPrefixEngine.cache_kind`)."""

SUPPORTED_MODEL_TYPES = ("qwen3_vl", "qwen2_5_vl")
"""``config.model_type`` values whose prefill/decoding this module reproduces (others keep ``generate``)."""

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


class PrefixCacheError(RuntimeError):
    """The shared-prefix path cannot answer this batch (the caller falls back to ``generate``)."""


def unsupported_reason(model: Any, generation_config: Any) -> str | None:
    """Why the shared-prefix engine cannot reproduce ``model.generate`` here, or None when it can."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        return f"model type {model_type!r} is not one of {', '.join(SUPPORTED_MODEL_TYPES)}"
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
class PrefixState:
    """A video's prefilled key/value cache (on the device), batch 1."""

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
                 resize_in_processor: bool, keep_prefixes: int = 1, cache: str = "dynamic"):
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
        """``dynamic``: the cache grows by concatenation each step (as ``generate``); ``static``: preallocated
        for the prompt and ``max_new_tokens``, written in place (no copy of the whole cache per step)."""
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
        return {
            "decoding": f"shared video prefix (one prefill per video), {'sampling' if self.do_sample else 'greedy'}, "
                        f"{self.cache_kind} KV cache",
            "cache": self.cache_kind,
            "keep_prefixes": self.keep_prefixes,
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

    def _rope_kwargs(self, inputs: dict) -> dict[str, Any]:
        return {k: v for k, v in inputs.items() if k in self._rope_params and k != "input_ids"}

    def prefill(self, video: PreparedVideo) -> PrefixState:
        """Vision tower + language model over one video's prefix (batch 1, no padding)."""
        import torch

        device = self.model.device
        dtype = self.model.dtype
        inputs = {}
        for k, v in video.inputs.items():
            if isinstance(v, torch.Tensor):
                v = v.to(device)
                if k in ("pixel_values_videos", "pixel_values") and v.is_floating_point():
                    v = v.to(dtype)
            inputs[k] = v
        ids = inputs["input_ids"]
        length = int(ids.shape[1])
        rope_pos, _ = self.model.model.get_rope_index(ids, **self._rope_kwargs(inputs))
        text_pos = torch.arange(length, device=device).view(1, 1, -1)
        position_ids = torch.cat([text_pos, rope_pos.to(device)], dim=0)
        forward = {k: v for k, v in inputs.items() if k not in ("attention_mask",)}
        out = self.model(**forward, attention_mask=inputs.get("attention_mask"), position_ids=position_ids,
                         use_cache=True, logits_to_keep=1)
        cache = getattr(out, "cache", None)
        if cache is None:
            cache = out.past_key_values
        keys = [layer.keys for layer in cache.layers]
        values = [layer.values for layer in cache.layers]
        last = rope_pos[:, 0, -1]
        if not bool((last == last[0]).all()):
            raise PrefixCacheError("the shared prefix does not end with a text token")
        return PrefixState(video.key, keys, values, length, int(last[0]) + 1, int(rope_pos.max()), ids)

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

        if self.model.device.type == "cuda":
            torch.cuda.synchronize(self.model.device)

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
            new_tokens = self._decode(prepared.rows, states)
            self._sync()
            self.stats.decode_seconds += time.perf_counter() - t0
        # keep the last videos' prefixes: a video split across batches continues in the next one
        order = list(dict.fromkeys(r.video_key for r in prepared.rows if r.video_key is not None))
        keep = order[-self.keep_prefixes:] if self.keep_prefixes > 0 else []
        self._states = {k: states[k] for k in keep}
        self.stats.batches += 1
        self.stats.questions += len(prepared.rows)
        texts = self.processor.batch_decode(new_tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        stop = set(self.stop_ids)
        outputs: list[GenerationOutput | None] = [None] * len(prepared.rows)
        for row, ids, text in zip(prepared.rows, new_tokens.tolist(), texts):
            stop_at = next((i for i, t in enumerate(ids) if t in stop), None)
            n_out = stop_at + 1 if stop_at is not None else len(ids)
            self.stats.generated_tokens += n_out
            prefix_len = states[row.video_key].length if row.video_key is not None else 0
            outputs[row.request_index] = GenerationOutput(
                text=text, prompt=row.prompt, num_input_tokens=prefix_len + len(row.suffix_ids), num_output_tokens=n_out,
                finish_reason="stop" if stop_at is not None else "length",
            )
        return outputs  # type: ignore[return-value]

    def _decode(self, rows: list[PreparedRow], states: dict[str, PrefixState]) -> "torch.Tensor":
        """Greedy decoding of every row; returns the (B, steps) new tokens (pad after a stop)."""
        import torch

        device = self.model.device
        batch = len(rows)
        p_max = max((states[r.video_key].length for r in rows if r.video_key is not None), default=0)
        s_max = max(len(r.suffix_ids) for r in rows)
        width = p_max + s_max
        static = self.cache_kind == "static"
        total = width + self.max_new_tokens if static else width
        mask = torch.zeros(batch, total, dtype=torch.long, device=device)
        ids = torch.full((batch, s_max), self.pad_id, dtype=torch.long, device=device)
        # rotary position = text index (real tokens before it) + delta. The question's tokens continue
        # after the prefix's last token; generated tokens follow generate's rule, max position + 1 + step
        # (the same unless a video's temporal positions run past the question's end).
        prompt_delta = torch.zeros(batch, dtype=torch.long, device=device)
        decode_delta = torch.zeros(batch, dtype=torch.long, device=device)
        for b, r in enumerate(rows):
            n = len(r.suffix_ids)
            ids[b, s_max - n:] = torch.tensor(r.suffix_ids, dtype=torch.long, device=device)
            mask[b, width - n:width] = 1
            if r.video_key is not None:
                st = states[r.video_key]
                mask[b, p_max - st.length:p_max] = 1
                prompt_delta[b] = st.next_position - st.length
                decode_delta[b] = max(st.max_position, st.next_position + n - 1) + 1 - (st.length + n)
        cache = self._batch_cache(rows, states, batch, p_max, total)

        prompt_text = (mask[:, :width].cumsum(-1) - 1).masked_fill(mask[:, :width] == 0, 1)[:, p_max:]
        prompt_rope = (prompt_text + prompt_delta[:, None]).unsqueeze(0).expand(3, -1, -1)
        real = mask[:, :width].sum(-1)  # P_b + S_b: text index of the first generated token

        stop = torch.tensor(self.stop_ids, dtype=torch.long, device=device)
        processors = self._logits_processors(width)
        sequence = self._sequence(rows, states, ids, p_max) if len(processors) else None
        out = self.model(input_ids=ids, attention_mask=mask,
                         position_ids=torch.cat([prompt_text.unsqueeze(0), prompt_rope], dim=0), cache=cache,
                         use_cache=True, logits_to_keep=1)
        finished = torch.zeros(batch, dtype=torch.bool, device=device)
        produced = []
        for step in range(self.max_new_tokens):
            scores = out.logits[:, -1, :].float()
            if sequence is not None:
                scores = processors(sequence, scores)
            if self.do_sample:
                token = torch.multinomial(torch.nn.functional.softmax(scores, dim=-1), num_samples=1).squeeze(1)
            else:
                token = scores.argmax(-1)
            token = torch.where(finished, torch.full_like(token, self.pad_id), token)
            produced.append(token)
            if sequence is not None:
                sequence = torch.cat([sequence, token[:, None]], dim=-1)
            finished = finished | torch.isin(token, stop)
            if step == self.max_new_tokens - 1 or bool(finished.all()):
                break
            if static:
                mask[:, width + step] = 1  # the column this step writes
            else:
                mask = torch.cat([mask, mask.new_ones((batch, 1))], dim=1)
            text = (real + step)[:, None]
            pos = torch.cat([text.unsqueeze(0), (text + decode_delta[:, None]).unsqueeze(0).expand(3, -1, -1)], dim=0)
            out = self.model(input_ids=token[:, None], attention_mask=mask, position_ids=pos, cache=cache,
                             use_cache=True, logits_to_keep=1)
        return torch.stack(produced, dim=1).cpu()

    def _logits_processors(self, prompt_width: int) -> Any:
        """generate's own logits processors for these settings (temperature, top-k/p, penalties...)."""
        return self.model._get_logits_processor(generation_config=self.generation_config, input_ids_seq_length=prompt_width,
                                                encoder_input_ids=None, prefix_allowed_tokens_fn=None, logits_processor=None,
                                                device=self.model.device, model_kwargs={})

    def _sequence(self, rows: list[PreparedRow], states: dict[str, PrefixState], suffix_ids: "torch.Tensor", p_max: int) -> "torch.Tensor":
        """The (B, P_max + S_max) token ids of the batch's prompts, pad id where the cache holds padding:
        what generate's processors see (its own batches hold left padding the same way)."""
        import torch

        seq = torch.full((len(rows), p_max), self.pad_id, dtype=torch.long, device=suffix_ids.device)
        for b, r in enumerate(rows):
            if r.video_key is not None:
                st = states[r.video_key]
                seq[b, p_max - st.length:] = st.input_ids[0].to(seq.device)
        return torch.cat([seq, suffix_ids], dim=1)

    def _batch_cache(self, rows: list[PreparedRow], states: dict[str, PrefixState], batch: int, p_max: int, total: int) -> Any:
        """The batch's cache holding each row's prefix right-aligned in ``p_max`` positions.

        Per layer, the videos' prefixes are stacked once (V rows) and expanded to the questions with
        one ``index_select``: a few kernels per layer instead of one copy per question.
        """
        import torch
        from transformers import DynamicCache, StaticCache

        static = self.cache_kind == "static"
        if not p_max:
            return StaticCache(config=self.model.config, max_cache_len=total) if static else DynamicCache(config=self.model.config)
        order = list(dict.fromkeys(r.video_key for r in rows))
        row_video = torch.tensor([order.index(r.video_key) for r in rows], dtype=torch.long, device=self.model.device)
        video_states = [states[k] for k in order]

        def expanded(i: int, values: bool) -> "torch.Tensor":
            first = (video_states[0].values if values else video_states[0].keys)[i]
            stacked = first.new_zeros((len(order), first.shape[1], p_max, first.shape[3]))
            for v, st in enumerate(video_states):
                stacked[v, :, p_max - st.length:] = (st.values if values else st.keys)[i][0]
            return stacked.index_select(0, row_video)

        n_layers = len(video_states[0].keys)
        if static:
            cache = StaticCache(config=self.model.config, max_cache_len=total)
            for i, layer in enumerate(cache.layers):
                k0, v0 = video_states[0].keys[i], video_states[0].values[i]
                layer.lazy_initialization(k0.new_empty((batch, k0.shape[1], 0, k0.shape[3])),
                                          v0.new_empty((batch, v0.shape[1], 0, v0.shape[3])))
                layer.keys[:, :, :p_max] = expanded(i, False)
                layer.values[:, :, :p_max] = expanded(i, True)
                layer.cumulative_length.fill_(p_max)
            return cache
        return DynamicCache(ddp_cache_data=[(expanded(i, False), expanded(i, True)) for i in range(n_layers)], config=self.model.config)

    # ------------------------------------------------------------------ convenience

    @classmethod
    def create_or_explain(cls, model: Any, processor: Any, generation_config: Any, stop_ids: Iterable[int], *,
                          resize_in_processor: bool, keep_prefixes: int = 1,
                          cache: str = "dynamic") -> tuple["SharedPrefixEngine | None", str | None]:
        """``(engine, None)``, or ``(None, why)`` when this model or these settings must stay on ``generate``
        (the caller logs ``why`` and records it, e.g. under ``inference.backend.decoding``)."""
        try:
            return cls(model, processor, generation_config, stop_ids, resize_in_processor=resize_in_processor,
                       keep_prefixes=keep_prefixes, cache=cache), None
        except PrefixCacheError as exc:
            return None, str(exc)

    def generate(self, requests: list[GenerationRequest], prompts: list[str]) -> list[GenerationOutput]:
        """``prepare`` then ``run`` (no overlap)."""
        return self.run(self.prepare(requests, prompts))


__all__ = [
    "CACHE_KINDS", "EngineStats", "PrefixCacheError", "PrefixState", "PreparedBatch", "PreparedRow", "PreparedVideo",
    "SharedPrefixEngine", "SUPPORTED_MODEL_TYPES", "frames_key", "split_shared_prefix", "unsupported_reason",
]
