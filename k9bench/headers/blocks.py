"""Typed views of the nested header blocks that readers use: a raw file's run settings (its ``inference``
block: ``frames``, ``prompt``, ``dataset``, ``backend``) and the judge's settings and input (``judge`` and
``input`` of its meta sidecar).

Values are as written: a reader still checks a value's type before trusting it (a file may be made by
hand). A block that is absent, or not an object, reads as all None; keys no field names are kept in
``extra``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

B = TypeVar("B", bound="Block")


@dataclass(frozen=True)
class Block:
    """A nested block: known keys as fields, the others in :attr:`extra`."""

    extra: dict = field(default_factory=dict)
    """Keys no field names, as written."""

    @classmethod
    def of(cls: type[B], value: Any) -> B:
        """The typed view of ``value`` (all None unless it is a JSON object)."""
        data = value if isinstance(value, dict) else {}
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in data.items() if k in names}, extra={k: v for k, v in data.items() if k not in names})


@dataclass(frozen=True)
class FrameSettings(Block):
    """``inference.frames`` (null in text-only mode): how the videos were sampled."""

    max_frames: Any = None
    fps: Any = None
    max_pixels: Any = None
    min_pixels: Any = None
    image_patch_size: Any = None
    decoder: Any = None
    audio: Any = None
    """Whether the model heard the soundtracks (``--audio``)."""


@dataclass(frozen=True)
class PromptSettings(Block):
    """``inference.prompt``: where the instructions stood and which system prompt it was."""

    placement: Any = None
    """``system``, ``empty_system`` or ``user_turn``."""
    use_system_message: Any = None
    system_prompt_source: Any = None
    system_prompt_sha256: Any = None
    reference_prompts: Any = None
    """``reference prompts (confirmed)`` or ``unconfirmed``."""


@dataclass(frozen=True)
class DatasetSettings(Block):
    """``inference.dataset``: the questions' source, split and range."""

    source: Any = None
    dataset_name: Any = None
    split: Any = None
    video_dir: Any = None


@dataclass(frozen=True)
class BackendInfo(Block):
    """``inference.backend``: what the backend reported about itself."""

    dtype: Any = None
    """The weights' dtype used."""
    device: Any = None
    server: Any = None
    """An OpenAI-compatible server's fingerprint (``--backend openai``)."""
    engine: Any = None
    """The in-process engine's fingerprint (``--backend vllm``)."""

    @property
    def serving(self) -> dict | None:
        """The server that answered: the server's fingerprint, else an in-process engine's; None for neither."""
        if isinstance(self.server, dict) and self.server:
            return self.server
        if isinstance(self.engine, dict) and self.engine.get("in_process"):
            return self.engine
        return None


@dataclass(frozen=True)
class JudgeSettings(Block):
    """The judge sidecar's ``judge`` block (docs/artifacts.md "judge JSON")."""

    model: Any = None
    judge_model: Any = None
    prompt_source: Any = None
    prompt_sha256: Any = None
    reference_prompt: Any = None
    """True when the template is the reference's (``k9bench.data.published.is_reference_prompt``)."""
    prompt_status: Any = None
    reference_prompts: Any = None
    """An older spelling of :attr:`prompt_status`."""
    fingerprint: Any = None


@dataclass(frozen=True)
class JudgeInput(Block):
    """The judge sidecar's ``input`` block: the judged file."""

    evaluations: Any = None
    sha256: Any = None
    stage: Any = None
    records: Any = None


__all__ = ["BackendInfo", "Block", "DatasetSettings", "FrameSettings", "JudgeInput", "JudgeSettings", "PromptSettings"]
