"""The Hugging Face transformers backend: ``AutoProcessor`` + ``AutoModelForImageTextToText``.

Works for any image-text-to-text model whose processor takes ``videos=`` (Qwen3-VL Instruct and
Thinking, Qwen2.5-VL, ...) with no model-name branching: what differs between families is read
from the processor (patch size, chat template) and the model's own generation config.

Frames arrive already sampled and resized by :mod:`k9bench.video` (qwen-vl-utils' rules, at the
processor's patch size), so the processor is called with ``do_sample_frames=False`` (it keeps our
frames and their indices, from which Qwen3-VL derives each frame's timestamp) and
``do_resize=False`` (no second resize), passing each video's metadata (source fps, indices,
frame count).

Device, dtype and attention follow :mod:`k9bench.accelerator` (one policy for every model the
project loads): bf16 weights and ``flash_attention_2`` on a GPU, as the reference. When flash-attn
is not installed, or on CPU, ``sdpa`` is used instead, with a warning that is logged and
recorded in the artifact (an explicit ``--attn_implementation flash_attention_2`` that cannot be
honoured is an error instead). On CPU the default dtype is float32 (recorded too).
"""

from __future__ import annotations

import copy
import gc
import logging
from typing import Any

from k9bench.accelerator import (  # noqa: F401 (re-exported for callers of the old names)
    AcceleratorError,
    flash_attn_available,
    free_accelerator_memory,
    is_out_of_memory,
    load_with_attention,
    resolve_attention,
    resolve_device,
    resolve_dtype,
)
from k9bench.inference.backend import BackendError, GenerationOutput, GenerationRequest
from k9bench.inference.settings import OpenAISettings, RunConfig

log = logging.getLogger(__name__)

GENERATION_KEYS = ("do_sample", "max_new_tokens", "temperature", "top_p", "top_k", "repetition_penalty", "num_beams")
"""Generation settings recorded with every record."""


class HFBackend:
    """Local transformers model (see the module doc)."""

    name = "hf"

    def __init__(self, config: RunConfig):
        from k9bench.settings import flags_given

        hf, gen = config.hf, config.generation
        self.model_name_or_path = config.model.model_name_or_path
        self.requested = {
            "torch_dtype": hf.torch_dtype,
            "bf16": hf.bf16,
            "attn_implementation": hf.attn_implementation,
            "device": hf.device,
        }
        self.trust_remote_code = hf.trust_remote_code
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
        self._patch_size: int | None = None
        self._resize_in_processor = True
        self._stop_ids: set[int] = set()
        given = flags_given(OpenAISettings, config.openai)
        if given:
            self._warn(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to --backend openai only; "
                       "ignored by the transformers backend")

    # ------------------------------------------------------------------ loading

    def _warn(self, text: str) -> None:
        log.warning("%s", text)
        self.warnings.append(text)

    def load(self) -> None:
        from transformers import AutoModelForImageTextToText, AutoProcessor

        from k9bench.progress import quiet_library_progress_bars

        quiet_library_progress_bars()
        try:
            self.device = resolve_device(self.requested["device"])
            dtype = resolve_dtype(self.requested["torch_dtype"], self.device, bf16=self.requested["bf16"])
            choice = resolve_attention(self.requested["attn_implementation"], self.device)
        except AcceleratorError as exc:
            raise BackendError(str(exc)) from None
        dtype_name, dtype_reason = dtype.name, dtype.reason
        if choice.warning:
            self._warn(choice.warning)
        if dtype_name != "bfloat16" and not dtype.explicit:
            self._warn(f"weights in {dtype_name} ({dtype_reason}), not the reference's bfloat16; pass --bf16 to use bfloat16 here")
        attn = choice.implementation
        log.info("loading %s (dtype %s: %s; attention %s; device %s)", self.model_name_or_path, dtype_name, dtype_reason, attn, self.device)

        def load_model(kernel: str) -> Any:
            kwargs: dict[str, Any] = {"dtype": dtype.torch_dtype(), "attn_implementation": kernel, "trust_remote_code": self.trust_remote_code}
            if self.device != "cpu":
                kwargs["device_map"] = self.device
            return AutoModelForImageTextToText.from_pretrained(self.model_name_or_path, **kwargs)

        try:
            self.processor = AutoProcessor.from_pretrained(self.model_name_or_path, trust_remote_code=self.trust_remote_code)
            self.model, used_choice = load_with_attention(load_model, choice, what=self.model_name_or_path)
        except (OSError, ValueError, ImportError, KeyError, RuntimeError) as exc:  # RuntimeError: out of GPU memory, mismatched weights
            raise BackendError(f"cannot load model {self.model_name_or_path!r}: {type(exc).__name__}: {exc}") from exc
        if used_choice is not choice:  # the automatic flash_attention_2 was refused at load time: sdpa, recorded
            self.warnings.append(used_choice.warning)
            attn = used_choice.implementation
        if self.device == "cpu":
            self.model.to("cpu")
        self.model.eval()

        tokenizer = getattr(self.processor, "tokenizer", None)
        if tokenizer is None:
            raise BackendError(f"{self.model_name_or_path}: the processor has no tokenizer")
        tokenizer.padding_side = "left"  # batched generation needs the prompts aligned on the right
        used_attn = getattr(self.model.config, "_attn_implementation", None) or attn
        if used_attn != attn:
            self._warn(f"attention implementation {attn!r} was asked for but the model uses {used_attn!r}")

        vp = getattr(self.processor, "video_processor", None)
        patch = getattr(vp, "patch_size", None)
        merge = getattr(vp, "merge_size", None)
        if isinstance(patch, int) and merge == 2:
            self._patch_size = patch
            self._resize_in_processor = False
        else:
            self._patch_size = None
            self._resize_in_processor = True
            if vp is not None:
                self._warn(
                    f"{type(vp).__name__} has patch_size={patch!r}, merge_size={merge!r}: frames are resized by the processor, not by qwen-vl-utils' rules"
                )

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
            "dtype_reason": dtype_reason,
            "attn_implementation": used_attn,
            "attn_implementation_requested": self.requested["attn_implementation"] or "default (flash_attention_2 on GPU)",
            "flash_attn_installed": flash_attn_available(),
            "trust_remote_code": self.trust_remote_code,
            "image_patch_size": self._patch_size,
            "frames_resized_by": "processor" if self._resize_in_processor else "k9bench.video (qwen-vl-utils rules)",
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
        return self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _inputs(self, batch: list[GenerationRequest], prompts: list[str]):
        with_frames = [r for r in batch if r.frames is not None]
        kwargs: dict[str, Any] = {"text": prompts, "padding": True, "return_tensors": "pt"}
        if with_frames:
            if len(with_frames) != len(batch):
                raise ValueError("a batch mixes requests with and without video")
            # uint8 frames are exact when the processor does not resize them again; when it does,
            # hand it float frames, which is what qwen-vl-utils' fetch_video returns to the reference.
            kwargs["videos"] = [r.frames.video_tensor() if self._resize_in_processor else r.frames.frames for r in batch]
            kwargs["video_metadata"] = [r.frames.processor_metadata() for r in batch]
            kwargs["do_sample_frames"] = False
            if not self._resize_in_processor:
                kwargs["do_resize"] = False
        inputs = self.processor(**kwargs)
        inputs = inputs.to(self.model.device)
        for key in ("pixel_values_videos", "pixel_values"):
            if key in inputs and inputs[key].is_floating_point():
                inputs[key] = inputs[key].to(self.model.dtype)
        return inputs

    def generate(self, batch: list[GenerationRequest]) -> list[GenerationOutput]:
        import torch

        prompts = [self.render_prompt(r.messages) for r in batch]
        inputs = self._inputs(batch, prompts)
        torch.manual_seed(batch[0].seed)
        with torch.inference_mode():
            out = self.model.generate(**inputs, generation_config=self.generation_config)
        prompt_len = inputs["input_ids"].shape[1]
        new_tokens = out[:, prompt_len:].cpu()
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

    # ------------------------------------------------------------------ errors

    def is_out_of_memory(self, exc: BaseException) -> bool:
        return is_out_of_memory(exc)

    def recover_from_out_of_memory(self) -> None:
        free_accelerator_memory()

    def close(self) -> None:
        self.model = None
        self.processor = None
        gc.collect()
