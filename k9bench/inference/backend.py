"""The model-backend interface of the inference loop, and the registry of backends.

The loop in :mod:`k9bench.inference.runner` knows nothing about a model family or an API: it
hands a backend a batch of :class:`GenerationRequest` (chat messages whose user turn holds a
``{"type": "video"}`` placeholder, plus the sampled frames of that video) and receives one
:class:`GenerationOutput` per request. A backend is any class with the methods of
:class:`Backend`; it is registered in :data:`BACKENDS` under the name ``--backend`` takes, as
``"module:Class"`` so that nothing heavy is imported until it is chosen.

To add one: write a module with a class built as ``Cls(config)`` from the run's
:class:`k9bench.inference.settings.RunConfig` (its own flags go in a settings class there, a
section of the config) with the methods below, and add its entry to :data:`BACKENDS`. The main
loop does not change.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from k9bench.audio import Audio
    from k9bench.inference.settings import RunConfig
    from k9bench.video import Frames

log = logging.getLogger(__name__)

BACKENDS: dict[str, str] = {
    "hf": "k9bench.inference.hf:HFBackend",
    "openai": "k9bench.inference.openai_backend:OpenAIBackend",
    "vllm": "k9bench.inference.vllm_backend:VLLMBackend",
}
"""``--backend`` name -> ``"module:Class"``. Modules are imported only when chosen."""


class BackendError(RuntimeError):
    """A backend cannot be created or loaded (bad model path, missing package...); the run stops."""


class BackendUnavailable(BackendError):
    """Raised by ``generate`` when the backend can answer no more questions (a server that stopped
    accepting connections): the run stops with the checkpoint kept, instead of turning every
    remaining question into a failed record."""


@dataclass
class GenerationRequest:
    """One question to answer."""

    key: int
    """The question's idx (for logs)."""
    messages: list[dict]
    """Chat messages. Content items are ``{"type": "text", "text": ...}`` or ``{"type": "video"}``
    (a placeholder standing for :attr:`frames`)."""
    frames: "Frames | None" = None
    """The sampled frames of the video (None in text-only mode)."""
    seed: int = 0
    """Seed to set before generating (matters only when sampling)."""
    video_path: str | None = None
    """The video file the frames come from (None in text-only mode), for backends that send the file itself."""
    audio: "Audio | None" = None
    """The video's soundtrack (``--audio``), at the rate the backend asked for (:meth:`Backend.audio_sampling_rate`)."""


@dataclass
class GenerationOutput:
    """A backend's answer to one :class:`GenerationRequest`."""

    text: str
    """The generated text only (not the prompt), special tokens removed."""
    prompt: str
    """The rendered prompt as the model saw it (before video-token expansion)."""
    num_input_tokens: int | None = None
    """Prompt length in tokens (video tokens included), when known."""
    num_output_tokens: int | None = None
    """Generated tokens up to and including the stop token, when known."""
    finish_reason: str | None = None
    """``stop`` (a stop token ended it) or ``length`` (``max_new_tokens`` reached), when known."""
    extra: dict = field(default_factory=dict)
    """Anything else the backend wants kept in the record."""


@runtime_checkable
class Backend(Protocol):
    """What the inference loop needs from a model backend."""

    name: str
    """Registry name (``hf``, ``openai``...)."""

    def load(self) -> None:
        """Load the model/processor or connect; raise :class:`BackendError` with a clear message."""

    def render_prompt(self, messages: list[dict]) -> str:
        """The prompt text recorded for ``messages`` (and hashed into ``prompt_sha256``)."""

    def generate(self, batch: list[GenerationRequest]) -> list[GenerationOutput]:
        """Answer a batch (requests may come from several videos, grouped by video); one output per request, in order.

        May raise; the loop records the failure for each request of the batch (and retries
        out-of-memory errors, see :meth:`is_out_of_memory`).
        """

    def describe(self) -> dict[str, Any]:
        """Effective settings as used (model, dtype, attention kernel, device, generation
        settings, warnings about anything that differs from what was asked). Written under
        ``inference.backend`` in the artifact; keys ``generation`` and ``attn_implementation``
        are also copied into every record."""

    def frame_patch_size(self) -> int | None:
        """The vision patch size frames must be resized for (``None``: the sampler's default)."""

    def is_out_of_memory(self, exc: BaseException) -> bool:
        """True when ``exc`` is an accelerator out-of-memory error worth a retry with fewer frames."""

    def recover_from_out_of_memory(self) -> None:
        """Free what can be freed after an out-of-memory error (e.g. empty the CUDA cache)."""

    def close(self) -> None:
        """Release resources."""

    # Optional (looked up with getattr by the runner):
    #   audio_sampling_rate() -> int | None: the rate soundtracks are read at under --audio
    #   sampling_overrides() -> dict: SamplingSettings keywords the model's frames need (exact frame size...)
    #   choose_batch_size(requested, questions=..., frames=...) -> batching.BatchSizeChoice (``--batch_size auto``)
    #   prepare_batch(requests) -> object (CPU only, any thread) and run_prepared(object) -> outputs:
    #       batches spanning videos with preparation ahead of the model (see runner._run_planned)
    #   run_stats() -> dict: counters of this invocation for ``run_stats``


def backend_class(name: str) -> type:
    """Import and return the backend class registered under ``name``."""
    target = BACKENDS.get(name)
    if target is None:
        raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(sorted(BACKENDS))}")
    module_name, _, cls_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise BackendError(f"backend {name!r} is not available in this version ({module_name} is missing)") from None
        raise
    return getattr(module, cls_name)


def create_backend(config: "RunConfig") -> Backend:
    """Instantiate the backend chosen by ``config.model.backend`` from the run's config."""
    cls = backend_class(config.model.backend)
    return cls(config)
