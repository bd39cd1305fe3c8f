"""``--backend vllm``: vLLM in-process (``vllm.LLM``), fed our own sampled frames.

Run from the vLLM environment (docs/vllm.md): ``eval_video_llm.py --backend vllm`` there. The model
sees exactly what the transformers backend gives it: each video is decoded once by our frame cache,
and its sampled frames go to vLLM as a video array with their true metadata (source fps, the
sampled frame indices, frame count, duration) and ``do_sample_frames=False``, so vLLM neither
resamples nor re-times them; the frames are already resized for the checkpoint's patch size, so
``do_resize=False``. The prompt is the processor's chat template, token for token the HF backend's.

The runner's planned path hands :meth:`VLLMBackend.prepare_batch` a chunk of questions grouped by
video (built on the CPU ahead of the engine) and :meth:`VLLMBackend.run_prepared` submits the whole
chunk in one ``LLM.generate`` call: prefix caching computes each video's prefix once, continuous
batching does the rest. The runner checkpoints each chunk as it comes back (a kill loses at most
one chunk). ``--batch_size auto`` is :func:`chunk_size`; docs/vllm.md explains the choice.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from k9bench.inference.backend import Backend, BackendError, GenerationOutput, GenerationRequest

if TYPE_CHECKING:
    from k9bench.inference.settings import RunConfig

log = logging.getLogger(__name__)

CHUNK_PER_SEQ = 4
"""``--batch_size auto``: questions per ``LLM.generate`` call, as a multiple of the engine's ``max_num_seqs``."""
MIN_CHUNK = 64
"""``--batch_size auto`` never goes below this many questions per call."""
STAMP = re.compile(r"<(\d+(?:\.\d+)?) seconds>")
"""Qwen3-VL's per-frame-pair time stamp in the prompt."""
OOM_MARKERS = ("out of memory", "cuda error: out of memory", "outofmemoryerror")


def chunk_size(max_num_seqs: int, questions: int) -> int:
    """Questions per ``LLM.generate`` call: ``CHUNK_PER_SEQ`` times the engine's running sequences (at
    least :data:`MIN_CHUNK`), at most the questions left. The engine stays full until the chunk's last
    quarter drains; a kill loses at most this many answers."""
    return max(1, min(questions, max(MIN_CHUNK, CHUNK_PER_SEQ * max_num_seqs)))


def _dtype(config: "RunConfig") -> str:
    """vLLM's ``dtype`` from ``--torch_dtype`` (or ``--bf16``); ``auto``: the checkpoint's."""
    if config.model.torch_dtype:
        return {"half": "float16", "float": "float32", "double": "float64"}.get(config.model.torch_dtype, config.model.torch_dtype)
    if config.model.bf16 is True:
        return "bfloat16"
    if config.model.bf16 is False:
        return "float32"
    return "auto"


class _Prepared:
    """A chunk built on the CPU: vLLM prompt dicts and the rendered prompt texts."""

    def __init__(self, prompts: list[dict], texts: list[str]):
        self.prompts, self.texts = prompts, texts


class VLLMBackend(Backend):
    """vLLM in-process; built as ``VLLMBackend(config)``, see the module docstring."""

    name = "vllm"

    def __init__(self, config: "RunConfig"):
        self.config = config
        self.llm: Any = None
        self.processor: Any = None
        self.tokenizer: Any = None
        self._patch: int | None = None
        self._info: dict[str, Any] = {}
        self._generation: dict[str, Any] = {}
        self._defaults: dict[str, Any] = {}
        self.warnings: list[str] = []
        self.stats = {"generate_calls": 0, "requests": 0, "prompt_tokens": 0, "output_tokens": 0}

    # ------------------------------------------------------------------ loading

    def load(self) -> None:
        try:
            import vllm
        except ImportError as exc:
            raise BackendError(f"--backend vllm needs vLLM in this environment ({exc}); run eval_video_llm.py from the "
                               "vLLM environment (docs/vllm.md)") from None
        from transformers import AutoProcessor

        cfg, v = self.config, self.config.vllm
        path = cfg.model.model_name_or_path
        try:
            self.processor = AutoProcessor.from_pretrained(path, trust_remote_code=cfg.model.trust_remote_code)
        except Exception as exc:
            raise BackendError(f"--model_name_or_path {path}: cannot load its processor ({exc})") from None
        video_processor = getattr(self.processor, "video_processor", None)
        self._patch = getattr(video_processor, "patch_size", None)
        kwargs: dict[str, Any] = {
            "model": path, "dtype": _dtype(cfg), "tensor_parallel_size": v.tensor_parallel,
            "gpu_memory_utilization": v.gpu_memory_utilization, "enforce_eager": v.enforce_eager,
            "enable_prefix_caching": True, "seed": cfg.generation.seed, "trust_remote_code": cfg.model.trust_remote_code,
            "limit_mm_per_prompt": {"image": 0, "video": 0 if cfg.frames.text_only else 1},
        }
        if v.max_model_len is not None:
            kwargs["max_model_len"] = v.max_model_len
        try:
            self.llm = vllm.LLM(**kwargs)
        except Exception as exc:
            raise BackendError(f"--backend vllm: the engine did not start for {path} ({type(exc).__name__}: {exc})") from None
        self.tokenizer = self.llm.get_tokenizer()
        self._defaults = self._model_defaults()
        self._generation = self._generation_settings()
        model_config = self.llm.llm_engine.model_config
        scheduler = self.llm.llm_engine.vllm_config.scheduler_config
        self.max_num_seqs = int(getattr(scheduler, "max_num_seqs", 256) or 256)
        batched_tokens = getattr(scheduler, "max_num_batched_tokens", None)
        self._info = {
            "backend": "vllm", "model": path, "device": str(getattr(self.llm.llm_engine.vllm_config.device_config, "device_type", "?")),
            "engine": {
                "engine": "vllm", "in_process": True, "version": vllm.__version__, "checkpoint": path,
                "dtype": str(model_config.dtype).removeprefix("torch."), "dtype_requested": kwargs["dtype"],
                "tensor_parallel": v.tensor_parallel, "max_model_len": int(model_config.max_model_len),
                "prefix_caching": True, "enforce_eager": v.enforce_eager, "gpu_memory_utilization": v.gpu_memory_utilization,
                "max_num_seqs": self.max_num_seqs, "max_num_batched_tokens": int(batched_tokens) if batched_tokens else None,
                "chunked_prefill": bool(getattr(scheduler, "enable_chunked_prefill", False)),
            },
            "attn_implementation": "vllm",
            "generation": dict(self._generation),
            "frame_patch_size": self._patch,
            "frames_to_engine": "our sampled frames, video array + true metadata, do_sample_frames=False, do_resize=False",
        }

    def _model_defaults(self) -> dict[str, Any]:
        """The checkpoint's generation config as vLLM reads it (temperature, top_p, top_k...)."""
        try:
            params = self.llm.get_default_sampling_params()
        except Exception:  # an engine without a generation config: vLLM's own defaults
            import vllm

            params = vllm.SamplingParams()
        return {"temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k,
                "repetition_penalty": params.repetition_penalty}

    def _generation_settings(self) -> dict[str, Any]:
        """Our flags mapped onto vLLM's sampling: ``--greedy`` is temperature 0; ``--do_sample`` or the
        model's config sample with the model's values, each overridden by the flag given."""
        gen = self.config.generation
        settings = dict(self._defaults)
        if gen.do_sample is False:
            settings.update(temperature=0.0, top_p=1.0, top_k=-1)
            do_sample = False
        else:
            for key in ("temperature", "top_p", "top_k"):
                if getattr(gen, key) is not None:
                    settings[key] = getattr(gen, key)
            if gen.do_sample is True and not settings.get("temperature"):
                settings["temperature"] = 1.0
            do_sample = bool(settings.get("temperature"))
        if settings.get("top_k") in (0, None):
            settings["top_k"] = -1
        return {"do_sample": do_sample, "max_new_tokens": gen.max_new_tokens, **settings}

    def _params(self, seed: int) -> Any:
        import vllm

        g = self._generation
        return vllm.SamplingParams(max_tokens=g["max_new_tokens"], temperature=g["temperature"], top_p=g["top_p"], top_k=g["top_k"],
                                   repetition_penalty=g["repetition_penalty"], seed=seed if g["do_sample"] else None)

    # ------------------------------------------------------------------ the Backend methods

    def describe(self) -> dict[str, Any]:
        return {**self._info, "warnings": list(self.warnings)}

    def frame_patch_size(self) -> int | None:
        return self._patch

    def render_prompt(self, messages: list[dict]) -> str:
        return self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def audio_sampling_rate(self) -> int | None:
        return None

    def sampling_overrides(self) -> dict[str, Any]:
        return {}

    def choose_batch_size(self, requested: int | str, *, questions: int, max_frames: int, max_pixels: int | None,
                          videos: int | None = None) -> Any:
        from k9bench.inference.batching import BatchSizeChoice, given_batch_size

        del max_frames, max_pixels, videos
        if requested != "auto":
            return given_batch_size(int(requested))
        size = chunk_size(self.max_num_seqs, questions)
        reason = f"vllm: {CHUNK_PER_SEQ} x max_num_seqs {self.max_num_seqs} (at least {MIN_CHUNK}, at most the {questions} questions)"
        return BatchSizeChoice("auto", size, reason, {"max_num_seqs": self.max_num_seqs, "questions": questions}, [[size, "auto"]])

    def _prompt(self, request: GenerationRequest) -> tuple[dict, str]:
        text = self.render_prompt(request.messages)
        prompt: dict[str, Any] = {"prompt": text}
        frames = request.frames
        if frames is not None:
            array = frames.frames.permute(0, 2, 3, 1).contiguous().numpy()  # (T, H, W, 3) uint8
            metadata = {**frames.processor_metadata(), "duration": float(frames.duration), "do_sample_frames": False}
            prompt["multi_modal_data"] = {"video": [(array, metadata)]}
            prompt["mm_processor_kwargs"] = {"do_sample_frames": False, "do_resize": False}
        return prompt, text

    def prepares_batches(self) -> bool:
        return True

    def prepare_batch(self, batch: list[GenerationRequest]) -> _Prepared:
        built = [self._prompt(r) for r in batch]
        prepared = _Prepared([p for p, _ in built], [t for _, t in built])
        prepared.seeds = [r.seed for r in batch]  # type: ignore[attr-defined]
        return prepared

    def run_prepared(self, prepared: _Prepared) -> list[GenerationOutput]:
        params = [self._params(seed) for seed in prepared.seeds]  # type: ignore[attr-defined]
        results = self.llm.generate(prepared.prompts, params, use_tqdm=False)
        self.stats["generate_calls"] += 1
        outputs = []
        for text, result in zip(prepared.texts, results):
            outputs.append(self._output(text, result))
        return outputs

    def generate(self, batch: list[GenerationRequest]) -> list[GenerationOutput]:
        return self.run_prepared(self.prepare_batch(batch))

    def _output(self, text: str, result: Any) -> GenerationOutput:
        completion = result.outputs[0]
        prompt_ids = list(result.prompt_token_ids or [])
        extra: dict[str, Any] = {"engine": "vllm"}
        decoded = self.tokenizer.decode(prompt_ids) if prompt_ids else ""
        stamps = [float(s) for s in STAMP.findall(decoded)]
        if stamps:
            extra["prompt_timestamps"] = stamps
        finish = completion.finish_reason
        self.stats["requests"] += 1
        self.stats["prompt_tokens"] += len(prompt_ids)
        self.stats["output_tokens"] += len(completion.token_ids)
        return GenerationOutput(text=completion.text, prompt=text, num_input_tokens=len(prompt_ids) or None,
                                num_output_tokens=len(completion.token_ids), finish_reason=finish if finish in ("stop", "length") else finish,
                                extra=extra)

    def run_stats(self) -> dict[str, Any]:
        return {"vllm": dict(self.stats)}

    def is_out_of_memory(self, exc: BaseException) -> bool:
        text = f"{type(exc).__name__}: {exc}".lower()
        return any(marker in text for marker in OOM_MARKERS)

    def recover_from_out_of_memory(self) -> None:
        """vLLM owns its memory (a preallocated KV cache): nothing to free here."""

    def close(self) -> None:
        llm, self.llm = self.llm, None
        if llm is None:
            return
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception as exc:  # the engine's processes go with ours anyway
            log.debug("vllm shutdown: %s", exc)
