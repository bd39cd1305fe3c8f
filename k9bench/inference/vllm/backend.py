"""``--backend vllm``: vLLM in-process (``vllm.LLM``), fed our own sampled frames.

Run from the vLLM environment (docs/vllm.md): ``eval_video_llm.py --backend vllm`` there. The model
sees exactly what the transformers backend gives it: each video is decoded once by our frame cache,
its frames are sized by the model family's rule exactly as the HF backend sizes them
(:func:`k9bench.video.policy.policy_for`), and they go to vLLM as a video array with ``do_sample_frames=False``
and ``do_resize=False`` (the Qwen families with their true metadata: source fps, the sampled frame indices,
frame count, duration), so vLLM neither resamples, re-times nor resizes them. The prompt is the processor's chat
template, token for token the HF backend's. :mod:`.prompts` builds the prompts: one array per video.

The runner's planned path hands :meth:`VLLMBackend.prepare_batch` a chunk of questions grouped by
video (built on the CPU ahead of the engine) and :meth:`VLLMBackend.run_prepared` submits the whole
chunk in one ``LLM.generate`` call: prefix caching computes each video's prefix once, continuous
batching does the rest. The runner checkpoints each chunk as it comes back (a kill loses at most
one chunk). ``--batch_size auto`` is :func:`.prompts.chunk_size`; docs/vllm.md explains the choice.

An engine that dies (vLLM's ``EngineDeadError``) ends the run at once with the engine's own reason, read from
the engine processes' log lines (:mod:`.engine_log`): no question is tried against it again.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from k9bench.inference.backend import Backend, BackendError, EngineDead, GenerationOutput, GenerationRequest
from k9bench.inference.vllm.prompts import Prepared, build_prompts, chunk_size, frame_bytes_bound

if TYPE_CHECKING:
    from k9bench.inference.settings import RunConfig

log = logging.getLogger(__name__)

STAMP = re.compile(r"<(\d+(?:\.\d+)?) seconds>")
"""Qwen3-VL's per-frame-pair time stamp in the prompt."""
OOM_MARKERS = ("out of memory", "cuda error: out of memory", "outofmemoryerror")


def _dtype(config: "RunConfig") -> str:
    """vLLM's ``dtype`` from ``--torch_dtype`` (or ``--bf16``); ``auto``: the checkpoint's."""
    if config.model.torch_dtype:
        return {"half": "float16", "float": "float32", "double": "float64"}.get(config.model.torch_dtype, config.model.torch_dtype)
    if config.model.bf16 is True:
        return "bfloat16"
    if config.model.bf16 is False:
        return "float32"
    return "auto"


class VLLMBackend(Backend):
    """vLLM in-process; built as ``VLLMBackend(config)``, see the module docstring."""

    name = "vllm"

    def __init__(self, config: "RunConfig"):
        self.config = config
        self.llm: Any = None
        self.processor: Any = None
        self.tokenizer: Any = None
        self._patch: int | None = None
        self.policy: Any = None
        self.engine_log: Any = None
        self._info: dict[str, Any] = {}
        self._generation: dict[str, Any] = {}
        self._defaults: dict[str, Any] = {}
        self.warnings: list[str] = []
        self.stats = {"generate_calls": 0, "requests": 0, "prompt_tokens": 0, "output_tokens": 0, "video_arrays": 0}

    # ------------------------------------------------------------------ loading

    def load(self) -> None:
        try:
            import vllm
        except ImportError as exc:
            raise BackendError(f"--backend vllm needs vLLM in this environment ({exc}); run eval_video_llm.py from the "
                               "vLLM environment (docs/vllm.md)") from None
        from transformers import AutoProcessor

        from k9bench.inference.vllm.engine_log import EngineLog
        from k9bench.models.hub import read_model_config
        from k9bench.video.policy import policy_for

        cfg, v = self.config, self.config.vllm
        path = cfg.model.model_name_or_path
        try:
            self.processor = AutoProcessor.from_pretrained(path, trust_remote_code=cfg.model.trust_remote_code)
        except Exception as exc:
            raise BackendError(f"--model_name_or_path {path}: cannot load its processor ({exc})") from None
        model_type = (read_model_config(path) or {}).get("model_type")
        self.policy = policy_for(self.processor, model_type=model_type)  # the HF backend's rule, by the same family row
        self._patch = self.policy.image_patch_size if self.policy.rule == "qwen_vl_rules" else None
        kwargs: dict[str, Any] = {
            "model": path, "dtype": _dtype(cfg), "tensor_parallel_size": v.tensor_parallel,
            "gpu_memory_utilization": v.gpu_memory_utilization, "enforce_eager": v.enforce_eager,
            "enable_prefix_caching": True, "seed": cfg.generation.seed, "trust_remote_code": cfg.model.trust_remote_code,
            "limit_mm_per_prompt": {"image": 0, "video": 0 if cfg.frames.text_only else 1},
        }
        if v.max_model_len is not None:
            kwargs["max_model_len"] = v.max_model_len
        self.engine_log = EngineLog.start()  # the engine processes' stderr passes through, its last lines kept
        try:
            self.llm = vllm.LLM(**kwargs)
        except Exception as exc:
            reason = self.engine_log.reason() or f"{type(exc).__name__}: {exc}"
            raise BackendError(f"--backend vllm: the engine did not start for {path} ({reason})") from None
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
            "frame_policy": self.policy.summary(),
            "frames_to_engine": ("our sampled frames, one array per video (a view, no copy) with its sha256 as multi_modal_uuids, "
                                 + ("true metadata, " if self.policy.video_metadata else "no metadata, ")
                                 + "do_sample_frames=False" + ("" if self.policy.resize_in_processor else ", do_resize=False")),
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
        """The family's exact frame size (InternVL), as the HF backend asks for it."""
        if self.policy is not None and self.policy.rule == "fixed_size":
            return {"frame_size": self.policy.frame_size}
        return {}

    def choose_batch_size(self, requested: int | str, *, questions: int, max_frames: int, max_pixels: int | None,
                          videos: int | None = None) -> Any:
        from k9bench.inference.batching import BatchSizeChoice, given_batch_size

        if requested != "auto":
            return given_batch_size(int(requested))
        frame_size = self.policy.frame_size if self.policy is not None and self.policy.rule == "fixed_size" else None
        per_video = frame_bytes_bound(max_frames, frame_size[0] * frame_size[1] if frame_size else max_pixels)
        size, reason = chunk_size(self.max_num_seqs, questions, videos=videos, frame_bytes=per_video)
        inputs = {"max_num_seqs": self.max_num_seqs, "questions": questions, "videos": videos, "frame_bytes_per_video": per_video}
        return BatchSizeChoice("auto", size, reason, inputs, [[size, "auto"]])

    def prepares_batches(self) -> bool:
        return True

    def prepare_batch(self, batch: list[GenerationRequest]) -> Prepared:
        return build_prompts(batch, self.render_prompt, self.policy)

    def run_prepared(self, prepared: Prepared) -> list[GenerationOutput]:
        params = [self._params(seed) for seed in prepared.seeds]
        try:
            results = self.llm.generate(prepared.prompts, params, use_tqdm=False)
        except Exception as exc:
            if _engine_dead(exc):
                reason = (self.engine_log.reason() if self.engine_log is not None else None) or f"{type(exc).__name__}: {exc}"
                raise EngineDead(f"--backend vllm: the engine died ({reason}); no further question is sent to it") from None
            raise
        self.stats["generate_calls"] += 1
        self.stats["video_arrays"] += prepared.videos
        return [self._output(text, result) for text, result in zip(prepared.texts, results)]

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
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception as exc:  # the engine's processes go with ours anyway
                log.debug("vllm shutdown: %s", exc)
        if self.engine_log is not None:
            self.engine_log.stop()
            self.engine_log = None


def _engine_dead(exc: BaseException) -> bool:
    """True for vLLM's ``EngineDeadError`` (the engine core process is gone: unrecoverable)."""
    try:
        from vllm.v1.engine.exceptions import EngineDeadError
    except ImportError:
        return False
    return isinstance(exc, EngineDeadError)

