"""The backends ``--backend`` can name: one entry each, importable without torch or any backend's packages.

Each entry says where the class is (``"module:Class"``, imported only when chosen, by
:func:`k9bench.inference.backend.backend_class`) and the facts the checks before a run need without
importing it: which section of :class:`k9bench.inference.settings.RunConfig` holds the backend's own
flags, whether it loads the checkpoint's weights on this machine (then a local model path and the
checkpoint's ``config.json`` are checked before anything loads), whether transformers loads them here
(``--device``/``--attn_implementation`` checked before torch), and how it sends frames and soundtracks
(an exact ``--frame_size``, audio as its own part). Code outside a backend's module asks these facts,
never the backend's name. ``--backend``'s choices are this table's keys (:data:`BACKEND_NAMES`), its help
the entries' :attr:`BackendEntry.summary`. Each entry also names its settings class and the ``--help`` group of
its flags: ``eval_video_llm.py``'s parser and :class:`~k9bench.inference.settings.RunConfig`'s sections are built
from these rows, not from a list of backends.

Nothing here imports another module of the project, so any module may import it.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any

MODEL_FLAGS_GROUP = "model (reference flags)"
"""The ``--help`` group of ``--model_name_or_path`` and ``--backend``; a backend whose :attr:`BackendEntry.flag_group`
is this one has its flags there, between those two (where the reference's transformers flags always stood)."""


@dataclass(frozen=True)
class BackendEntry:
    """One registered backend."""

    target: str
    """``"module:Class"``: the :class:`k9bench.inference.backend.Backend` subclass."""
    settings_section: str
    """The :class:`~k9bench.inference.settings.RunConfig` attribute holding its own flags (written as
    ``inference.backend_settings`` and compared on resume)."""
    settings: str = dataclasses.field(kw_only=True)
    """``"module:Class"``: the frozen settings class of its own flags (the type of that ``RunConfig`` attribute),
    imported only when the parser or the config is built."""
    flag_group: str = dataclasses.field(kw_only=True)
    """The title of the ``--help`` group its flags are listed in (:data:`MODEL_FLAGS_GROUP`: among the model flags);
    backends naming the same title share the group, groups stand in registry order."""
    add_flags: str = dataclasses.field(default="", kw_only=True)
    """``"module:function"`` adding its flags to the group (``function(group)``), for flags that are not plain
    :func:`k9bench.settings.add_arguments` of :attr:`settings`; empty: ``add_arguments(group, settings)``."""
    local_weights: bool
    """True: it loads the checkpoint on this machine (``--model_name_or_path`` is a Hub id or a folder here)."""
    summary: str = ""
    """What it is, for ``--backend``'s help."""
    transformers_load: bool = False
    """True: transformers loads the checkpoint here, on ``--device`` with ``--attn_implementation`` (both checked
    before torch is imported), from a folder that must hold ``config.json``."""
    exact_frame_size: bool = False
    """True: its section's ``frame_size`` resizes every sampled frame to exactly WxH (the sampler may then take
    up to 2*W*H pixels, so that frames are scaled down, never up)."""
    audio_part: bool = False
    """True: under ``--audio`` the soundtrack travels as its own part beside the frames, in its section's
    ``audio_format`` (part of the records' fingerprint); its section's ``video_transport`` ``video_url`` cannot
    carry it."""
    audio: bool = True
    """True: under ``--audio`` it sends the model a video's soundtrack; False: ``--audio`` is refused before anything
    loads (the preflight checks)."""
    api_key_without_base_url: bool = False
    """True: with no ``base_url`` in its section it calls the OpenAI API itself, which needs the key before anything runs."""
    engine_module: str = ""
    """A module of its own engine that the python running inference must import (``"vllm"``), checked by the
    launcher before any stage runs; empty: nothing beyond the project's own requirements."""
    samples_video_itself: bool = False
    """True: the API gets each video file and samples all of it at ``--fps`` itself (Gemini's ``video_metadata.fps``):
    :func:`~k9bench.inference.settings.resolve` raises ``--max_frames`` to the whole video (recorded as adjusted), and the
    frames decoded here only check each file (the backend's ``sampling_overrides``)."""
    also_reads: tuple[str, ...] = ()
    """Fields of another backend's section it reads too (Gemini: the API flags of the openai section, ``--base_url``...),
    so that they are not reported as ignored (:func:`k9bench.inference.settings.inapplicable_flags`)."""
    check: str = ""
    """``"module:function"``: ``function(config)`` returns the one line refusing the run's settings (its API key missing,
    flags its API cannot take) or None; called before any work. Empty: nothing of its own to check."""
    tensor_parallel: bool = False
    """True: one model copy spans several GPUs (its section's ``tensor_parallel``; the launcher's ``TENSOR_PARALLEL``,
    default ``GPUS``), never one copy per GPU (``--data_parallel``)."""


REGISTRY: dict[str, BackendEntry] = {
    "hf": BackendEntry("k9bench.inference.hf.backend:HFBackend", "hf", local_weights=True, summary="transformers, local weights",
                       transformers_load=True, settings="k9bench.inference.hf.settings:HFSettings", flag_group=MODEL_FLAGS_GROUP),
    "openai": BackendEntry("k9bench.inference.openai_compat.backend:OpenAIBackend", "openai", local_weights=False,
                           summary="an OpenAI-compatible server", exact_frame_size=True, audio_part=True, api_key_without_base_url=True,
                           settings="k9bench.inference.openai_compat.settings:OpenAISettings", flag_group="OpenAI-compatible backend (--backend openai)",
                           add_flags="k9bench.inference.openai_compat.settings:add_openai_arguments",
                           check="k9bench.inference.openai_compat.request:modality_problem"),
    "vllm": BackendEntry("k9bench.inference.vllm.backend:VLLMBackend", "vllm", local_weights=True,
                         summary="vLLM in-process, from the vLLM environment: docs/vllm.md",
                         settings="k9bench.inference.vllm.settings:VLLMSettings", flag_group="vLLM in-process (--backend vllm)",
                         engine_module="vllm", tensor_parallel=True, audio=False),
    "gemini": BackendEntry("k9bench.inference.gemini.backend:GeminiBackend", "gemini", local_weights=False,
                           summary="Gemini's own API (google-genai), each video uploaded once: docs/inference.md",
                           settings="k9bench.inference.gemini.settings:GeminiSettings", flag_group="Gemini API (--backend gemini)",
                           samples_video_itself=True, also_reads=("base_url", "concurrency", "timeout", "max_retries", "retry_backoff"),
                           check="k9bench.inference.gemini.settings:missing_key"),
}
"""``--backend`` name -> :class:`BackendEntry`."""

BACKEND_NAMES: tuple[str, ...] = tuple(REGISTRY)
"""The registered names, in registry order."""

DEFAULT_BACKEND = "hf"
"""``--backend`` (and the launcher's ``BACKEND``) when not given: transformers, local weights."""


def entry(name: str) -> BackendEntry:
    """The entry of ``name``; ``KeyError`` naming the choices when unknown."""
    found = REGISTRY.get(name)
    if found is None:
        raise KeyError(f"unknown backend {name!r}; choose one of {', '.join(sorted(REGISTRY))}")
    return found


def backend_settings(config: Any) -> Any:
    """The run's own settings section of its backend (``config.hf``, ``config.openai``...)."""
    return getattr(config, entry(config.model.backend).settings_section)


def load(ref: str) -> Any:
    """What a ``"module:Name"`` string names (:attr:`BackendEntry.settings`, :attr:`BackendEntry.add_flags`), its
    module imported now, never when this registry is."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def choices_help() -> str:
    """``--backend``'s choices with what each is (``hf (transformers, local weights), ...``)."""
    return ", ".join(f"{name} ({e.summary})" if e.summary else name for name, e in REGISTRY.items())


__all__ = ["BACKEND_NAMES", "BackendEntry", "MODEL_FLAGS_GROUP", "REGISTRY", "backend_settings", "choices_help", "entry", "load"]
