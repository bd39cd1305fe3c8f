"""The Hugging Face transformers backend: ``AutoProcessor`` + ``AutoModelForImageTextToText``.

Works for any image-text-to-text model whose processor takes ``videos=`` (Qwen3-VL Instruct and
Thinking, Qwen2.5-VL, ...) with no model-name branching: what differs between families is read
from the processor (patch size, chat template) and the model's own generation config.

How frames (and a soundtrack) are handed to the processor is chosen by the model's family (the row of
:data:`k9bench.models.families.FAMILIES` for its ``model_type``) and the processor's type in
:mod:`k9bench.video.policy`, nowhere else: Qwen-style patch grids (Qwen2.5-VL, Qwen3-VL, the Omni
thinkers) get frames resized by qwen-vl-utils' rules at the processor's patch size, with
``do_sample_frames=False``/``do_resize=False`` and each video's metadata; fixed-size video
processors (InternVL) get frames sampled at exactly their size (:meth:`HFBackend.sampling_overrides`);
the Omni processors get the sampled ``fps`` keyword (a batch is split by sampled fps for them). With
``--audio`` the soundtrack goes to Omni thinkers as audio-in-video input (``use_audio_in_video``);
a processor that cannot take it is refused at load.

Two modes (docs/inference.md says which to pick): batch size 1 is ``generate`` one question at a time, the
reference's exact behaviour (the default, ``auto`` on CPU); a batch size above 1 is ``generate`` over a batch of
questions that may span videos (``prepare_batch`` runs the processor on a worker thread ahead of the model,
``run_prepared`` calls ``generate``), the prompts left-padded, nothing of transformers' below its public API.
``--batch_size auto`` on a GPU is :func:`k9bench.inference.hf.batching.auto_batch_size`: what the free memory holds.
The processor is used by one thread at a time (fast tokenizers refuse concurrent use).
An uncached Hub id while the Hub is out of reach is refused before anything loads (:meth:`HFBackend.check_source`).

Device, dtype and attention follow :mod:`k9bench.models.accelerator` (one policy for every model the
project loads; the loading itself is :mod:`k9bench.inference.hf.load`'s): bf16 weights and ``flash_attention_2`` on a GPU, as the reference. ``--device_map``
(``auto``, ``balanced``, ``balanced_low_0``, ``sequential`` or a JSON map of module -> device) with
``--max_memory`` spreads a model over several GPUs, the CPU and disk through accelerate (the reference
loads with ``device_map="auto"``); where it went (modules and layers per device) is recorded under
``inference.backend.placement``. When flash-attn
is not installed, or on CPU, ``sdpa`` is used instead, with a warning that is logged and
recorded in the artifact (an explicit ``--attn_implementation flash_attention_2`` that cannot be
honoured is an error instead). On CPU the default dtype is float32 (recorded too).
"""

from __future__ import annotations

import copy
import gc
import logging
import threading
from typing import Any

from k9bench.models.accelerator import flash_attn_available, free_accelerator_memory, is_out_of_memory
from k9bench.inference.backend import Backend, BackendError, GenerationOutput, GenerationRequest
from k9bench.inference.settings import RunConfig

log = logging.getLogger(__name__)

GENERATION_KEYS = ("do_sample", "max_new_tokens", "temperature", "top_p", "top_k", "repetition_penalty", "num_beams")
"""Generation settings recorded with every record."""


class HFBackend(Backend):
    """Local transformers model (see the module doc)."""

    name = "hf"

    def __init__(self, config: RunConfig):
        hf, gen, model = config.hf, config.generation, config.model
        self.model_name_or_path = model.model_name_or_path
        self.requested = {
            "torch_dtype": model.torch_dtype,
            "bf16": model.bf16,
            "attn_implementation": hf.attn_implementation,
            "device": hf.device,
            "device_map": hf.device_map,
            "max_memory": hf.max_memory,
        }
        self.trust_remote_code = model.trust_remote_code
        self.overrides: dict[str, Any] = {"max_new_tokens": gen.max_new_tokens}
        for key in ("do_sample", "temperature", "top_p", "top_k"):
            if getattr(gen, key) is not None:
                self.overrides[key] = getattr(gen, key)
        self.warnings: list[str] = []
        self.model = None
        self.processor = None
        self.device = "cpu"
        self.generation_config = None
        self._info: dict[str, Any] = {}
        self._offload_folder: str | None = None
        self._patch_size: int | None = None
        self._resize_in_processor = True
        self._stop_ids: set[int] = set()
        self.audio = config.frames.audio
        self.policy = None
        self._processor_lock = threading.RLock()
        """Held around every use of the processor: batches are prepared on worker threads, and fast tokenizers
        refuse concurrent use ("Already borrowed")."""

    # ------------------------------------------------------------------ loading

    def _warn(self, text: str) -> None:
        log.warning("%s", text)
        self.warnings.append(text)

    def check_source(self) -> None:
        """Refuse at once a model that could only fail slowly: a Hub id that is not cached while the Hub is
        out of reach (:func:`k9bench.models.hub.check_model_source`); one line naming the fix."""
        from k9bench.models import hub

        try:
            hub.check_model_source(self.model_name_or_path, what="model", setting=hub.setting_name("--model_name_or_path", "MODEL_NAME"),
                                   offline_model=hub.TINY_VIDEO_MODEL)
        except hub.HubUnavailable as exc:
            raise BackendError(str(exc)) from None

    def load(self) -> None:
        self.check_source()  # before transformers is even imported
        from k9bench.inference.hf.load import load_model
        from k9bench.progress import quiet_library_progress_bars

        quiet_library_progress_bars()
        loaded = load_model(self.model_name_or_path, self.requested, trust_remote_code=self.trust_remote_code, warnings=self.warnings,
                            offload_folder=self._offload_folder)
        self.model, self.processor, self.device, self._offload_folder = loaded.model, loaded.processor, loaded.device, loaded.offload_folder
        attn, placement, device_map, max_memory = loaded.attn, loaded.placement, loaded.device_map, loaded.max_memory

        tokenizer = getattr(self.processor, "tokenizer", None)
        if tokenizer is None:
            raise BackendError(f"{self.model_name_or_path}: the processor has no tokenizer")
        tokenizer.padding_side = "left"  # batched generation needs the prompts aligned on the right

        from k9bench.video.policy import policy_for

        vp = getattr(self.processor, "video_processor", None)
        policy = self.policy = policy_for(self.processor, model_type=self.model.config.model_type)
        self._resize_in_processor = policy.resize_in_processor
        self._patch_size = policy.image_patch_size if policy.rule == "qwen_vl_rules" else None
        if policy.rule == "processor_resizes" and vp is not None:
            self._warn(f"{type(vp).__name__} has patch_size={getattr(vp, 'patch_size', None)!r}, "
                       f"merge_size={getattr(vp, 'merge_size', None)!r}: frames are resized by the processor, not by qwen-vl-utils' rules")
        if self.audio:
            if not policy.audio_in_video:
                from k9bench.models.families import audio_labels

                raise BackendError(f"--audio: {policy.processor_class} does not take a video's soundtrack as audio-in-video input "
                                   f"({audio_labels()} do); run without --audio")
            if policy.audio_window_seconds is not None:
                log.info("--audio: %s keeps at most %.0f s of a soundtrack", policy.processor_class, policy.audio_window_seconds)

        gen = copy.deepcopy(self.model.generation_config)
        gen.update(**self.overrides)
        if gen.do_sample and gen.temperature is not None and gen.temperature <= 0:
            # transformers would reject it at every generate call, turning each question into a failed record
            raise BackendError(f"the model samples (do_sample from {'--do_sample' if 'do_sample' in self.overrides else 'its generation config'}) "
                               f"but temperature is {gen.temperature}; pass --greedy, or a temperature > 0")
        if gen.pad_token_id is None:
            gen.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.generation_config = gen
        eos = gen.eos_token_id
        self._stop_ids = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}
        if not self._stop_ids and tokenizer.eos_token_id is not None:
            self._stop_ids = {tokenizer.eos_token_id}

        self._info = {
            "name": self.name,
            "model_name_or_path": self.model_name_or_path,
            "model_class": type(self.model).__name__,
            "processor_class": type(self.processor).__name__,
            "video_processor_class": type(vp).__name__ if vp is not None else None,
            "device": str(self.device),
            "dtype": str(self.model.dtype).replace("torch.", ""),
            "dtype_reason": loaded.dtype_reason,
            "dtype_requested": self.requested["torch_dtype"],
            "device_map": device_map or None,
            "max_memory": {str(k): v for k, v in max_memory.items()} if max_memory else None,
            "placement": placement,
            "offload_folder": self._offload_folder if placement and "disk" in placement["modules_per_device"] else None,
            "attn_implementation": attn,
            "attn_implementation_requested": self.requested["attn_implementation"] or "default (flash_attention_2 on GPU)",
            "flash_attn_installed": flash_attn_available(),
            "trust_remote_code": self.trust_remote_code,
            "image_patch_size": self._patch_size,
            "frames_resized_by": ("processor" if self._resize_in_processor else
                                  f"k9bench.video ({'exact frame size' if policy.rule == 'fixed_size' else 'qwen-vl-utils rules'})"),
            "frame_policy": policy.summary(),
            "audio": self.audio,
            "generation": self.generation_settings(),
            "generation_overrides": dict(self.overrides),
            "padding_side": "left",
        }

    def generation_settings(self) -> dict[str, Any]:
        """The effective generation settings (the model's generation config plus our overrides)."""
        gen = self.generation_config
        return {key: getattr(gen, key, None) for key in GENERATION_KEYS}

    def describe(self) -> dict[str, Any]:
        return {**self._info, "warnings": list(self.warnings)}

    def frame_patch_size(self) -> int | None:
        return self._patch_size

    # ------------------------------------------------------------------ generation

    def render_prompt(self, messages: list[dict]) -> str:
        with self._processor_lock:
            return self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def audio_sampling_rate(self) -> int | None:
        """The rate soundtracks are read at under ``--audio`` (the feature extractor's), else None."""
        return self.policy.audio_sampling_rate if self.audio and self.policy is not None else None

    def sampling_overrides(self) -> dict[str, Any]:
        """Frame sampling keywords this processor needs (InternVL: the exact frame size)."""
        if self.policy is not None and self.policy.rule == "fixed_size":
            return {"frame_size": self.policy.frame_size}
        return {}

    def _cpu_inputs(self, batch: list[GenerationRequest], prompts: list[str]):
        with_frames = [r for r in batch if r.frames is not None]
        kwargs: dict[str, Any] = {"text": prompts, "padding": True, "return_tensors": "pt"}
        if with_frames:
            if len(with_frames) != len(batch):
                raise ValueError("a batch mixes requests with and without video")
            audio = None
            if self.audio:
                missing = [r.video_path for r in batch if r.audio is None]
                if missing:
                    raise ValueError(f"--audio: no soundtrack given for {missing[0]}")
                audio = [r.audio for r in batch]
            kwargs.update(self.policy.processor_kwargs([r.frames for r in batch], audio))
        with self._processor_lock:
            return self.processor(**kwargs)

    def _to_device(self, inputs):
        inputs = inputs.to(self.device)
        for key in ("pixel_values_videos", "pixel_values"):
            if key in inputs and inputs[key].is_floating_point():
                inputs[key] = inputs[key].to(self.model.dtype)
        return inputs

    def _inputs(self, batch: list[GenerationRequest], prompts: list[str]):
        return self._to_device(self._cpu_inputs(batch, prompts))

    def _fps_groups(self, batch: list[GenerationRequest]) -> list[list[int]]:
        """Request positions split by sampled fps where the processor takes one ``fps`` per call."""
        if self.policy is None or not self.policy.fps_keyword:
            return [list(range(len(batch)))]
        groups: dict[Any, list[int]] = {}
        for i, r in enumerate(batch):
            groups.setdefault(None if r.frames is None else round(float(r.frames.sample_fps), 9), []).append(i)
        return list(groups.values())

    def generate(self, batch: list[GenerationRequest]) -> list[GenerationOutput]:
        groups = self._fps_groups(batch)
        if len(groups) == 1:
            return self._generate_plain(batch, self._inputs(batch, [self.render_prompt(r.messages) for r in batch]))
        outputs: list[GenerationOutput | None] = [None] * len(batch)
        for members in groups:
            part = [batch[i] for i in members]
            for i, out in zip(members, self.generate(part)):
                outputs[i] = out
        return outputs  # type: ignore[return-value]

    def _generate_plain(self, batch: list[GenerationRequest], inputs) -> list[GenerationOutput]:
        import torch

        prompts = [self.render_prompt(r.messages) for r in batch]
        torch.manual_seed(batch[0].seed)
        with_audio = any(r.audio is not None for r in batch)
        with torch.inference_mode():
            out = self.model.generate(**inputs, generation_config=self.generation_config,
                                      **(self.policy.generate_kwargs(with_audio) if self.policy is not None else {}))
        prompt_len = inputs["input_ids"].shape[1]
        new_tokens = out[:, prompt_len:].cpu()
        with self._processor_lock:
            texts = self.processor.batch_decode(new_tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        mask = inputs.get("attention_mask")
        outputs = []
        for row, (text, prompt) in enumerate(zip(texts, prompts)):
            ids = new_tokens[row].tolist()
            stop_at = next((i for i, t in enumerate(ids) if t in self._stop_ids), None)
            n_out = stop_at + 1 if stop_at is not None else len(ids)
            n_in = int(mask[row].sum()) if mask is not None else prompt_len
            outputs.append(
                GenerationOutput(
                    text=text,
                    prompt=prompt,
                    num_input_tokens=n_in,
                    num_output_tokens=n_out,
                    finish_reason="stop" if stop_at is not None else "length",
                )
            )
        return outputs

    # ------------------------------------------------------------------ batches spanning videos

    def prepare_batch(self, batch: list[GenerationRequest]) -> "_Prepared":
        """CPU work of a batch on a worker thread: the processor's inputs for ``generate`` (split by sampled fps where the
        processor takes one ``fps`` per call)."""
        prompts = [self.render_prompt(r.messages) for r in batch]
        parts = []
        for members in self._fps_groups(batch):
            parts.append((members, self._cpu_inputs([batch[i] for i in members], [prompts[i] for i in members])))
        return _Prepared(batch, parts)

    def run_prepared(self, prepared: "_Prepared") -> list[GenerationOutput]:
        """Answer a batch made by :meth:`prepare_batch` with ``generate`` on the model's device; one output per request, in order."""
        batch = prepared.requests
        outputs: list[GenerationOutput | None] = [None] * len(batch)
        for members, inputs in prepared.parts:
            for i, out in zip(members, self._generate_plain([batch[i] for i in members], self._to_device(inputs))):
                outputs[i] = out
        return outputs  # type: ignore[return-value]

    def prepares_batches(self) -> bool:
        """True: batches span videos, prepared ahead (:meth:`prepare_batch`) and answered by :meth:`run_prepared`."""
        return True

    def choose_batch_size(self, requested: int | str, *, questions: int, max_frames: int, max_pixels: int | None,
                          videos: int | None = None) -> Any:
        """``--batch_size`` as a :class:`k9bench.inference.batching.BatchSizeChoice` (``auto``: 1 on CPU; on a GPU
        :func:`k9bench.inference.hf.batching.auto_batch_size` over the free memory)."""
        from k9bench.inference.batching import AUTO, given_batch_size
        from k9bench.inference.hf.batching import auto_batch_size, prompt_tokens_estimate

        if requested != AUTO:
            return given_batch_size(int(requested))
        device = str(self.device)
        if not device.startswith("cuda"):
            return auto_batch_size(None, self.model.config, device=device)
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        prompt = prompt_tokens_estimate(self.policy, self._patch_size, max_frames=max_frames, max_pixels=max_pixels)
        return auto_batch_size(int(free), self.model.config, device=device, questions=questions, prompt_tokens=prompt,
                               max_new_tokens=int(self.generation_config.max_new_tokens),
                               dtype_bytes=torch.empty((), dtype=self.model.dtype).element_size())

    # ------------------------------------------------------------------ errors

    def is_out_of_memory(self, exc: BaseException) -> bool:
        return is_out_of_memory(exc)

    def recover_from_out_of_memory(self) -> None:
        free_accelerator_memory()

    def close(self) -> None:
        self.model = None
        self.processor = None
        gc.collect()
        if self._offload_folder:
            import shutil

            shutil.rmtree(self._offload_folder, ignore_errors=True)
            self._offload_folder = None


class _Prepared:
    """A batch prepared on the CPU by :meth:`HFBackend.prepare_batch`."""

    __slots__ = ("requests", "parts")

    def __init__(self, requests: list[GenerationRequest], parts: list):
        self.requests = requests
        self.parts = parts
        """``[(positions, processor inputs)]``: one ``generate`` call each."""
