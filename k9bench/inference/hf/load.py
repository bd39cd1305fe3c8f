"""How the transformers backend loads its checkpoint: where the model goes (``--device``, or ``--device_map`` with
``--max_memory`` through accelerate, an offload folder when a module goes to disk), in which dtype and with which
attention kernel (:mod:`k9bench.models.accelerator`'s policy, one for every model the project loads), and the
``from_pretrained`` calls themselves. :class:`k9bench.inference.hf.backend.HFBackend` calls :func:`load_model` once, in
``load()``, and records what it returns; a setting that cannot be honoured is a :class:`~k9bench.inference.backend.BackendError`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from k9bench.inference.backend import BackendError
from k9bench.models.accelerator import (
    AcceleratorError,
    load_with_attention,
    parse_device_map,
    parse_max_memory,
    placement_flags_problem,
    placement_summary,
    resolve_attention,
    resolve_device,
    resolve_dtype,
    resolve_placement,
)

log = logging.getLogger("k9bench.inference.hf.backend")


@dataclass
class LoadedModel:
    """What :func:`load_model` loaded, and how."""

    model: Any
    processor: Any
    device: str
    """Where inputs go: ``--device`` resolved, or the input embedding's device of a model spread by ``--device_map``."""
    dtype_reason: str
    attn: str
    """The attention kernel asked of ``from_pretrained`` (sdpa when an automatic flash_attention_2 was refused)."""
    device_map: Any
    max_memory: dict | None
    placement: dict | None
    """Modules and layers per device (:func:`k9bench.models.accelerator.placement_summary`) with ``--device_map``, else None."""
    offload_folder: str | None


def placement_request(requested: dict) -> tuple[Any, dict | None]:
    """``(device_map, max_memory)`` from ``--device_map``/``--max_memory`` (None, None: the whole model on
    ``--device``); a combination that cannot mean one thing is refused before anything loads."""
    text, memory = requested["device_map"], requested["max_memory"]
    problem = placement_flags_problem(requested["device"], text, memory)
    if problem:
        raise AcceleratorError(problem)
    if not text:
        return None, None
    return parse_device_map(text), (parse_max_memory(memory) if memory else None)


def _warn(warnings: list[str], text: str) -> None:
    log.warning("%s", text)
    warnings.append(text)


def load_model(name: str, requested: dict, *, trust_remote_code: bool, warnings: list[str],
               offload_folder: str | None = None) -> LoadedModel:
    """The processor and the model of ``name`` as ``requested`` (the backend's ``--torch_dtype``, ``--bf16``,
    ``--attn_implementation``, ``--device``, ``--device_map``, ``--max_memory``), in eval mode; what differs from the
    reference's setup is appended to ``warnings`` (and logged). ``offload_folder``: the one an earlier load made."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    try:
        device_map, max_memory = placement_request(requested)
        device = resolve_placement(device_map, max_memory) if device_map else resolve_device(requested["device"])
        dtype = resolve_dtype(requested["torch_dtype"], device, bf16=requested["bf16"])
        choice = resolve_attention(requested["attn_implementation"], device)
    except AcceleratorError as exc:
        raise BackendError(str(exc)) from None
    if choice.warning:
        _warn(warnings, choice.warning)
    if dtype.name != "bfloat16" and not dtype.explicit:
        _warn(warnings, f"weights in {dtype.name} ({dtype.reason}), not the reference's bfloat16; pass --bf16 to use bfloat16 here")
    attn = choice.implementation
    log.info("loading %s (dtype %s: %s; attention %s; device %s)", name, dtype.name, dtype.reason, attn, device)
    folder = [offload_folder]

    def from_pretrained(kernel: str) -> Any:
        kwargs: dict[str, Any] = {"dtype": dtype.torch_dtype(), "attn_implementation": kernel, "trust_remote_code": trust_remote_code}
        if device_map:
            import tempfile

            folder[0] = folder[0] or tempfile.mkdtemp(prefix="k9bench_offload_")
            kwargs.update(device_map=device_map, offload_folder=folder[0])
            if max_memory:
                kwargs["max_memory"] = dict(max_memory)  # from_pretrained rewrites it in place
        elif device != "cpu":
            kwargs["device_map"] = device
        return AutoModelForImageTextToText.from_pretrained(name, **kwargs)

    try:
        processor = AutoProcessor.from_pretrained(name, trust_remote_code=trust_remote_code)
        model, used_choice = load_with_attention(from_pretrained, choice, what=name)
    except (OSError, ValueError, ImportError, KeyError, RuntimeError) as exc:  # RuntimeError: out of GPU memory, mismatched weights
        if folder[0] and folder[0] != offload_folder:  # made by this call: nobody else would remove it
            import shutil

            shutil.rmtree(folder[0], ignore_errors=True)
        raise BackendError(f"cannot load model {name!r}: {type(exc).__name__}: {exc}") from exc
    if used_choice is not choice:  # the automatic flash_attention_2 was refused at load time: sdpa, recorded
        warnings.append(used_choice.warning)
        attn = used_choice.implementation
    placement = placement_summary(model) if device_map else None
    if placement is None and device == "cpu":
        model.to("cpu")
    if placement is not None:  # inputs go where the input embedding is (accelerate's hooks move activations on)
        weight = model.get_input_embeddings().weight
        device = str(weight.device) if weight.device.type != "meta" else "cpu"
        log.info("model placed across devices: %s", placement["layers_per_device"])
    model.eval()
    return LoadedModel(model=model, processor=processor, device=device, dtype_reason=dtype.reason, attn=attn, device_map=device_map,
                       max_memory=max_memory, placement=placement, offload_folder=folder[0])


__all__ = ["LoadedModel", "load_model", "placement_request"]
