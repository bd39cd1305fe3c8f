"""The model families the project knows: one row each, keyed by ``config.json``'s ``model_type``.

Everything that differs between families lives in this table and nowhere else:

- the **frame rule** (:data:`FRAME_RULES`, applied by :func:`k9bench.video.policy.policy_for`):
  ``qwen_vl_rules`` (frames resized by qwen-vl-utils' rule at the processor's patch size),
  ``fixed_size`` (every frame resized once to the video processor's one size) or
  ``processor_resizes`` (the processor resizes them itself);
- **audio**: whether the checkpoint hears a video's soundtrack (``--audio``), checked against a local
  ``config.json`` before anything loads (:func:`k9bench.inference.planning.check_model_config`);
- **processor quirks**: the processor classes that are this family's (how a processor is known without
  its model), a processor that takes the sampled frame rate as ``fps=``, the family's evaluation frame
  count, the vision patch a fixed-size frame is cut into (``--batch_size auto``'s token estimate);
- the **tiny model**: the builder of a random-weight checkpoint of the family (``python -m
  k9bench.tiny_model --family NAME``), named as ``"module:function"`` so that this table imports no torch.

Nothing here imports another module of the project or any heavy package, so any module may import it.
A family that transformers supports (``AutoProcessor`` takes ``videos=``, ``AutoModelForImageTextToText``
loads it) is added with one :class:`Family` row in :data:`FAMILIES`; docs/architecture.md ("Add a model
family") says what else a family may need.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

FRAME_RULES = ("qwen_vl_rules", "fixed_size", "processor_resizes")
"""The frame-handling rules a family can follow (see the module doc)."""


@dataclass(frozen=True)
class Family:
    """One model family (one row of :data:`FAMILIES`)."""

    name: str
    """The family's name: ``--family`` of ``python -m k9bench.tiny_model``, and the row's key."""
    label: str
    """How messages name it (``Qwen2.5-VL``)."""
    model_types: tuple[str, ...]
    """``config.json`` ``model_type`` values of its checkpoints (a model and its thinker-only part)."""
    frame_rule: str
    """One of :data:`FRAME_RULES`: how its frames are sized before its processor sees them."""
    audio: bool = False
    """True: it hears a video's soundtrack (``--audio``), as audio-in-video input."""
    processors: tuple[str, ...] = ()
    """Processor class names that are this family's."""
    video_processors: tuple[str, ...] = ()
    """Video processor class names that are only this family's (a ``fixed_size`` rule needs one)."""
    fps_keyword: bool = False
    """True: its processor takes the sampled frame rate as ``fps=`` (it ignores the metadata's), one per call."""
    evaluation_frames: int | None = None
    """Frame count of the family's evaluation setting, when it has one (the policy's ``recommended_max_frames``)."""
    frame_patch: tuple[int, int] | None = None
    """``(patch side, temporal patch)`` a fixed-size frame is cut into, for ``--batch_size auto``'s token estimate."""
    tiny_builder: str | None = None
    """``"module:function"`` writing a tiny random-weight checkpoint ``(path, seed=0) -> path``; None: none."""
    tiny_aliases: tuple[str, ...] = ()
    """Other spellings ``python -m k9bench.tiny_model --family`` accepts for it."""
    tiny_head_dim: bool = False
    """True: its tiny builder takes ``head_dim``."""


FAMILIES: dict[str, Family] = {row.name: row for row in (
    Family("qwen3_vl", "Qwen3-VL", ("qwen3_vl",), "qwen_vl_rules", processors=("Qwen3VLProcessor",),
           tiny_builder="k9bench.tiny_model.qwen_vl:build_tiny_qwen3vl", tiny_aliases=("qwen3vl",), tiny_head_dim=True),
    Family("qwen2_5_vl", "Qwen2.5-VL", ("qwen2_5_vl",), "qwen_vl_rules", processors=("Qwen2_5_VLProcessor",),
           tiny_builder="k9bench.tiny_model.qwen_vl:build_tiny_qwen2_5vl", tiny_aliases=("qwen2_5vl",)),
    Family("internvl", "InternVL", ("internvl",), "fixed_size", processors=("InternVLProcessor",),
           video_processors=("InternVLVideoProcessor",), evaluation_frames=32, frame_patch=(14, 1),
           tiny_builder="k9bench.tiny_model.families:build_tiny_internvl"),
    Family("qwen2_5_omni", "Qwen2.5-Omni thinker", ("qwen2_5_omni", "qwen2_5_omni_thinker"), "qwen_vl_rules", audio=True,
           processors=("Qwen2_5OmniProcessor",), fps_keyword=True,
           tiny_builder="k9bench.tiny_model.families:build_tiny_qwen2_5omni", tiny_aliases=("qwen2_5omni",)),
    Family("qwen3_omni", "Qwen3-Omni thinker", ("qwen3_omni_moe", "qwen3_omni_moe_thinker"), "qwen_vl_rules", audio=True,
           processors=("Qwen3OmniMoeProcessor",), fps_keyword=True,
           tiny_builder="k9bench.tiny_model.families:build_tiny_qwen3omni", tiny_aliases=("qwen3omni",)),
)}
"""Family name -> :class:`Family`: the one table (see the module doc)."""

DEMO_FAMILY = "qwen3_vl"
"""The family of the demo's tiny model (``DEMO=1``)."""

DEMO_AUDIO_FAMILY = "qwen2_5_omni"
"""The family of the demo's tiny model under ``AUDIO=1`` (it hears the soundtracks)."""


def for_model_type(model_type: str | None) -> Family | None:
    """The row whose :attr:`Family.model_types` holds ``model_type``, or None (a family the table does not know)."""
    return next((row for row in FAMILIES.values() if model_type and model_type in row.model_types), None)


def for_processor(processor_class: str | None, video_processor_class: str | None = None) -> Family | None:
    """The row that owns a processor (its video processor class first, then its processor class), or None."""
    by_video = next((row for row in FAMILIES.values() if video_processor_class and video_processor_class in row.video_processors), None)
    return by_video or next((row for row in FAMILIES.values() if processor_class and processor_class in row.processors), None)


def hears_audio(model_type: str | None) -> bool:
    """True when checkpoints of ``model_type`` take a video's soundtrack (``--audio``)."""
    row = for_model_type(model_type)
    return bool(row and row.audio)


def audio_labels() -> str:
    """The families that hear a soundtrack, for messages (``Qwen2.5-Omni thinker, Qwen3-Omni thinker``)."""
    return ", ".join(row.label for row in FAMILIES.values() if row.audio)


def tiny_names() -> dict[str, str]:
    """Every spelling ``--family`` of the tiny-model builder accepts -> the family's name (names and aliases)."""
    names: dict[str, str] = {}
    for row in FAMILIES.values():
        if row.tiny_builder:
            names.update({spelling: row.name for spelling in (row.name, *row.tiny_aliases)})
    return names


def tiny_builder(name: str) -> Callable:
    """The tiny-model builder of family ``name`` (a name or alias), imported now; ``ValueError`` naming the choices."""
    row = FAMILIES.get(tiny_names().get(name, ""))
    if row is None or row.tiny_builder is None:
        raise ValueError(f"unknown family {name!r}; choose one of {', '.join(n for n in FAMILIES if FAMILIES[n].tiny_builder)}")
    module, _, function = row.tiny_builder.partition(":")
    return getattr(importlib.import_module(module), function)


__all__ = [
    "DEMO_AUDIO_FAMILY", "DEMO_FAMILY", "FAMILIES", "FRAME_RULES", "Family", "audio_labels", "for_model_type", "for_processor",
    "hears_audio", "tiny_builder", "tiny_names",
]
