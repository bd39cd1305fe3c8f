"""The model-backend interface of the inference loop, and the import of a registered backend.

The loop in :mod:`k9bench.inference.runner` knows nothing about a model family or an API: it
hands a backend a batch of :class:`GenerationRequest` (chat messages whose user turn holds a
``{"type": "video"}`` placeholder, plus the sampled frames of that video) and receives one
:class:`GenerationOutput` per request. A backend is a subclass of
:class:`Backend`: four methods are its own (``load``, ``render_prompt``, ``generate``, ``describe``), and
every optional capability (batches spanning videos prepared ahead, batches in flight, the batch size
rule, audio, what a server says about itself, counters, close) has a default there that says "not
supported", so the loop calls methods and never probes for them. It is registered in
:data:`k9bench.inference.registry.REGISTRY` under the name ``--backend`` takes, as ``"module:Class"`` so
that nothing heavy is imported until it is chosen.

To add one: write a module with a :class:`Backend` subclass built as ``Cls(config)`` from the run's
:class:`k9bench.inference.settings.RunConfig` (its own flags go in a settings class there, a
section of the config), override what it supports, and add its entry to the registry. The main
loop does not change.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from k9bench.inference import registry

if TYPE_CHECKING:
    from k9bench.video.audio import Audio
    from k9bench.inference.settings import RunConfig
    from k9bench.video.sampling import Frames

log = logging.getLogger(__name__)


class BackendError(RuntimeError):
    """A backend cannot be created or loaded (bad model path, missing package...); the run stops."""


class BackendUnavailable(BackendError):
    """Raised by ``generate`` (or ``prepare_batch``/``run_prepared``) when the backend can answer no more questions (a
    server that stopped accepting connections): the run stops at once with the checkpoint kept (exit 3), instead of
    turning every remaining question into a failed record."""


class EngineDead(BackendUnavailable):
    """The backend's engine died (vLLM's engine core exited, a worker crashed): its message is the engine's own reason.
    The run ends at once in one line, exit 3, the checkpoint kept; no question is tried against it again."""


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


class Backend:
    """What the inference loop needs from a model backend: subclass it (see the module doc).

    A subclass implements :meth:`load`, :meth:`render_prompt`, :meth:`generate` and :meth:`describe`;
    every other method has a default meaning "not supported" (no batches spanning videos, one batch in
    flight, ``--batch_size auto`` is 1, no audio, no server, nothing to free or close)."""

    name: str = ""
    """Registry name (``hf``, ``openai``...)."""

    # ------------------------------------------------------------ what every backend implements

    def load(self) -> None:
        """Load the model/processor or connect; raise :class:`BackendError` with a clear message."""
        raise NotImplementedError

    def render_prompt(self, messages: list[dict]) -> str:
        """The prompt text recorded for ``messages`` (and hashed into ``prompt_sha256``)."""
        raise NotImplementedError

    def generate(self, batch: list[GenerationRequest]) -> list[GenerationOutput]:
        """Answer a batch (requests may come from several videos, grouped by video); one output per request, in order.

        May raise; the loop records the failure for each request of the batch (and retries
        out-of-memory errors, see :meth:`is_out_of_memory`).
        """
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """Effective settings as used (model, dtype, attention kernel, device, generation
        settings, warnings about anything that differs from what was asked). Written under
        ``inference.backend`` in the artifact; keys ``generation`` and ``attn_implementation``
        are also copied into every record."""
        raise NotImplementedError

    # ------------------------------------------------------------ optional capabilities (defaults: none)

    def frame_patch_size(self) -> int | None:
        """The vision patch size frames must be resized for (``None``: the sampler's default)."""
        return None

    def sampling_overrides(self) -> dict[str, Any]:
        """:class:`~k9bench.video.cache.SamplingSettings` keywords the model's frames need (an exact frame size...)."""
        return {}

    def audio_sampling_rate(self) -> int | None:
        """The rate soundtracks are read at under ``--audio`` (None: this backend takes no soundtrack)."""
        return None

    def choose_batch_size(self, requested: int | str, *, questions: int, max_frames: int, max_pixels: int | None,
                          videos: int | None = None) -> Any:
        """``--batch_size`` as a :class:`k9bench.inference.batching.BatchSizeChoice` for ``questions`` questions over
        ``videos`` videos. Default: as given, and ``auto`` is 1 (a backend with a memory rule overrides it)."""
        from k9bench.inference.batching import AUTO, BatchSizeChoice, given_batch_size

        if requested == AUTO:
            return BatchSizeChoice(AUTO, 1, f"backend {self.name}: auto means 1 question per batch", {}, [[1, "chosen"]])
        return given_batch_size(int(requested))

    def prepares_batches(self) -> bool:
        """True: batches may span videos, prepared on the CPU ahead of the model (:meth:`prepare_batch`, any
        thread) and answered by :meth:`run_prepared`. Default False:
        the loop goes video by video through :meth:`generate`."""
        return False

    def prepare_batch(self, requests: list[GenerationRequest]) -> Any:
        """CPU work for a batch, on any thread (only called when :meth:`prepares_batches`)."""
        raise NotImplementedError(f"backend {self.name!r} does not prepare batches")

    def run_prepared(self, prepared: Any) -> list[GenerationOutput]:
        """Answer a batch made by :meth:`prepare_batch`; one output per request, in order."""
        raise NotImplementedError(f"backend {self.name!r} does not prepare batches")

    def max_batches_in_flight(self) -> int:
        """Batches the loop may have generating at once on their own threads (a server: several; default 1)."""
        return 1

    def server_info(self) -> dict[str, Any] | None:
        """What the server answering says about itself (``inference.backend.server``); None: no server."""
        return None

    def run_stats(self) -> dict[str, Any]:
        """Counters of this invocation (``run_stats.decoding``); empty by default."""
        return {}

    def is_out_of_memory(self, exc: BaseException) -> bool:
        """True when ``exc`` is an accelerator out-of-memory error worth a retry with fewer frames (default: never)."""
        return False

    def recover_from_out_of_memory(self) -> None:
        """Free what can be freed after an out-of-memory error (e.g. empty the CUDA cache); default nothing."""

    def close(self) -> None:
        """Release resources; default nothing."""


def backend_class(name: str) -> type:
    """Import and return the backend class registered under ``name`` (:data:`k9bench.inference.registry.REGISTRY`)."""
    found = registry.REGISTRY.get(name)
    if found is None:
        raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(sorted(registry.REGISTRY))}")
    target = found.target
    module_name, _, cls_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise BackendError(f"backend {name!r} is not available in this version ({module_name} is missing)") from None
        raise
    cls = getattr(module, cls_name)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendError(f"backend {name!r}: {target} is not a subclass of k9bench.inference.backend.Backend")
    return cls


def create_backend(config: "RunConfig") -> Backend:
    """Instantiate the backend chosen by ``config.model.backend`` from the run's config."""
    cls = backend_class(config.model.backend)
    return cls(config)
