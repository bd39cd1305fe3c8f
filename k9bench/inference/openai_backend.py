"""The OpenAI-compatible backend (``eval_video_llm.py --backend openai``).

Any chat-completions server works: the OpenAI API (GPT-4o), Gemini's or another vendor's
OpenAI-compatible endpoint, or a self-hosted ``vllm serve`` / SGLang server (``--base_url``).
The prompt, answer extraction, raw artifact, checkpoints and resume are the shared runner's
(:mod:`k9bench.inference.runner`), exactly as for the transformers backend; this module only
turns one request into one HTTP call.

How the video travels (``--video_transport``):

``frames`` (default)
    The frames the shared sampler chose (qwen-vl-utils' rules: ``--fps``, ``--max_frames``,
    ``--max_pixels``), in order, each as a ``{"type": "image_url"}`` part holding a
    ``data:image/jpeg;base64,...`` URL, placed where the runner's ``{"type": "video"}``
    placeholder stands (before the question). ``--frame_size WxH`` resizes every frame to
    exactly W x H (bicubic, antialiased) before encoding, e.g. 512x512 for the paper's GPT-4o
    protocol; the sampler is then allowed up to ``2*W*H`` pixels so the frames are scaled down,
    not up. Works with every vision chat API.
``video_url``
    One ``{"type": "video_url"}`` part for servers that take video (vLLM, SGLang). Its URL is
    the original file as ``data:video/mp4;base64,...`` (self-contained, but every request
    carries the whole file), or ``--video_url_base``/``{scene}.mp4`` (e.g. ``file:///data/videos``
    with ``vllm serve --allowed-local-media-path /data/videos``, or an HTTP folder). The
    server samples the frames itself; the run's sampling settings go along in the request
    body as ``mm_processor_kwargs: {"fps": F, "do_sample_frames": true}`` and
    ``media_io_kwargs: {"video": {"num_frames": N}}`` (vLLM reads both; other servers ignore
    unknown fields). ``--extra_body`` can override them. The records' frame fields then say
    ``null`` for what the server chose (the local decode only checks the file).

Concurrency: the runner keeps up to ``--concurrency`` batches in flight
(:meth:`OpenAIBackend.max_batches_in_flight`), started video by video in dataset order, so the
requests about one video are sent next to each other and a server's prefix cache can reuse
the video; the requests of a batch (``--batch_size``, default 1) go out together. At most
``--concurrency`` HTTP calls are in flight over all batches. Each call is retried by
:class:`k9bench.openai_api.ChatClient` (429, 5xx, timeouts, broken bodies; Retry-After honoured).
When some requests of a batch still fail, ``generate`` raises so that the runner reruns the
batch question by question; the answers already received are handed back then without a
second call, and the failures are raised again at once, so each question costs one call
(plus its retries) and a failure becomes a record with ``error``.

With ``--audio`` (frames transport only) each video's soundtrack, read once per video at
:data:`k9bench.audio.API_SAMPLING_RATE` (16 kHz mono), follows the frames as exactly one
``{"type": "input_audio", "input_audio": {"data": <base64>, "format": "wav"|"mp3"}}`` part
(``--audio_format``; Gemini's OpenAI-compatible endpoint takes it), encoded once per video.

The key is read from ``OPENAI_API_KEY`` only (a ``--base_url`` server that needs none gets a
placeholder), is scrubbed from every error text, and is written nowhere.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from k9bench.inference.backend import BackendError, BackendUnavailable, GenerationOutput, GenerationRequest
from k9bench.inference.settings import (  # noqa: F401 (re-exported: the flags' types and choices live in settings)
    IMAGE_DETAILS,
    MAX_TOKENS_PARAMS,
    TRANSPORTS,
    VIDEO_FPS_MAX_FRAMES,
    HFSettings,
    RunConfig,
    frame_size_tuple,
    parse_frame_size,
    parse_json_object,
)

if TYPE_CHECKING:
    from k9bench.video import Frames

log = logging.getLogger(__name__)

_CONTEXT_OVERFLOW = re.compile(
    r"context[ _]length|maximum context|context window|too many tokens|prompt is too long|too long for the model"
    r"|exceeds? the (?:model'?s? )?(?:maximum|max)|request entity too large|payload too large",
    re.IGNORECASE,
)


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class RequestSettings:
    """What each request is built from: the run's config seen from this backend (no defaults of its
    own: every value comes from :class:`~k9bench.inference.settings.RunConfig`)."""

    api_model: str
    """Model name sent in each request (``--api_model``, else ``--model_name_or_path``)."""
    base_url: str | None
    """Endpoint (``.../v1``); None: the OpenAI API."""
    concurrency: int
    """Requests in flight at most."""
    max_retries: int
    """Retries per request after the first attempt."""
    timeout: float
    """Seconds per HTTP attempt."""
    retry_backoff: float
    """Seconds before the first retry (doubled each time, jittered; Retry-After wins when longer)."""
    video_transport: str
    """``frames`` or ``video_url``."""
    frame_size: str | None
    """``WxH`` every frame is resized to before encoding (None: as sampled)."""
    jpeg_quality: int
    """JPEG quality of the frames."""
    image_detail: str | None
    """OpenAI's image ``detail`` (None: not sent)."""
    video_url_base: str | None
    """With ``video_url``: URL folder holding ``{scene}.mp4`` (None: a data URL of the file)."""
    video_fps: float | None
    """``--video_fps`` when given (whole-video sampling at this rate)."""
    fps: float
    """Sampling rate of the run (passed to the server with ``video_url``)."""
    max_frames: int
    """Frame cap of the run (passed to the server with ``video_url``)."""
    max_new_tokens: int
    """Token budget of the reply."""
    max_tokens_param: str
    """Name of the token-budget parameter."""
    do_sample: bool | None
    """False (``--greedy``): temperature 0 unless ``--temperature`` is given."""
    temperature: float | None
    """Sent when set."""
    top_p: float | None
    """Sent when set."""
    top_k: int | None
    """Sent in the body when set (vLLM/SGLang; the OpenAI API rejects it)."""
    send_seed: bool
    """Send the run's ``--seed`` as ``seed``."""
    extra_body: dict
    """Extra JSON merged into every request body (wins over ours)."""
    audio: bool = False
    """``--audio``: each request carries the video's soundtrack as one ``input_audio`` part after the frames."""
    audio_format: str = "wav"
    """Encoding of that part (``wav`` or ``mp3``)."""

    @classmethod
    def from_config(cls, config: RunConfig) -> "RequestSettings":
        o, g, f = config.openai, config.generation, config.frames
        return cls(
            api_model=o.api_model or config.model.model_name_or_path, base_url=o.base_url, concurrency=o.concurrency,
            max_retries=o.max_retries, timeout=o.timeout, retry_backoff=o.retry_backoff, video_transport=o.video_transport,
            frame_size=o.frame_size, jpeg_quality=o.jpeg_quality, image_detail=o.image_detail, video_url_base=o.video_url_base,
            video_fps=o.video_fps, fps=f.fps, max_frames=f.max_frames, max_new_tokens=g.max_new_tokens,
            max_tokens_param=o.max_tokens_param, do_sample=g.do_sample, temperature=g.temperature, top_p=g.top_p, top_k=g.top_k,
            send_seed=not o.no_seed_param, extra_body=dict(o.extra_body or {}), audio=f.audio, audio_format=o.audio_format,
        )


def _merge(base: dict, override: dict) -> dict:
    """``base`` updated by ``override``, recursing into nested dicts."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


class ApiCallError(RuntimeError):
    """A request that failed after its retries (or got an empty reply); the message says why."""

    def __init__(self, message: str, *, kind: str | None = None, status_code: int | None = None, attempts: int = 0):
        super().__init__(message)
        self.kind = kind
        """``rate_limit``, ``server_error``, ``timeout``, ``connection``, ``bad_response``, ``client_error`` or ``empty_reply``."""
        self.status_code = status_code
        """HTTP status of the last failed attempt, when there was one."""
        self.attempts = attempts
        """HTTP attempts made."""


class BatchPartlyFailed(RuntimeError):
    """Some requests of a batch failed; the runner reruns the batch question by question."""

    def __init__(self, failures: dict[int, ApiCallError], total: int):
        self.failures = failures
        """Question idx -> its error."""
        first = next(iter(failures.values()))
        super().__init__(f"{len(failures)} of {total} request(s) failed (first: {first})")


# --------------------------------------------------------------------------- the backend


class OpenAIBackend:
    """Chat completions over HTTP (see the module doc)."""

    name = "openai"

    def __init__(self, config: RunConfig):
        from k9bench.settings import flags_given

        if config.generation.max_new_tokens is None:
            raise BackendError("max_new_tokens is not resolved (build the config with k9bench.inference.settings.resolve)")
        o = config.openai
        if o.api_model and config.model.model_name_or_path != o.api_model:
            raise BackendError(
                f"--api_model {o.api_model!r} and --model_name_or_path {config.model.model_name_or_path!r} disagree; "
                "with --backend openai give --api_model only (it names the run too)"
            )
        settings = RequestSettings.from_config(config)
        warnings: list[str] = []
        size = frame_size_tuple(o.frame_size)
        max_pixels = config.frames.max_pixels
        if size and not config.frames.text_only and max_pixels is not None and max_pixels < size[0] * size[1]:
            warnings.append(f"--max_pixels {max_pixels} is below {o.frame_size} ({size[0] * size[1]} pixels): frames are scaled up to {o.frame_size}")
        if o.video_transport == "video_url" and o.frame_size:
            warnings.append("--frame_size has no effect with --video_transport video_url (the server samples and resizes the video)")
        if o.video_transport != "video_url" and o.video_url_base:
            warnings.append("--video_url_base has no effect unless --video_transport video_url")
        ignored = flags_given(HFSettings, config.hf)
        if ignored:
            warnings.append(f"{', '.join(ignored)} {'has' if len(ignored) == 1 else 'have'} no effect with --backend openai "
                            "(the server's weights, dtype, attention kernel and device apply)")
        for text in warnings:
            log.warning("%s", text)
        for name, change in config.adjustments.items():
            log.info("--%s raised from %s to %s (%s)", name, change["from"], change["to"], change["why"])
        self.settings = settings
        self.warnings: list[str] = warnings
        self.adjustments = dict(config.adjustments)
        self.client = None
        self.api_key_source: str | None = None
        self._lock = threading.Lock()
        self._usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "requests": 0,
                       "failed_requests": 0, "retries": 0, "served_models": []}
        self._info: dict[str, Any] = {}
        self._media: dict[Any, tuple[Any, list[dict]]] = {}  # id(frames) or path -> (frames or path, parts), recent videos
        self._media_gates: dict[Any, threading.Lock] = {}  # one builder per video at a time
        self._media_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max(1, settings.concurrency))  # HTTP calls in flight, over all batches
        self._carry: dict[int, tuple[str, Any, GenerationOutput | ApiCallError]] = {}
        self._unreachable_streak = 0  # requests in a row that could not connect
        self.unreachable_limit = max(10, 3 * max(1, settings.concurrency))
        """Requests in a row that could not connect (after their retries) before the run stops."""

    # ------------------------------------------------------------------ loading

    def load(self) -> None:
        from k9bench.openai_api import API_KEY_ENV, PLACEHOLDER_KEY, ChatClient, MissingApiKey, RetryPolicy, resolve_api_key

        s = self.settings
        try:
            key = resolve_api_key(s.base_url)
        except MissingApiKey as exc:
            raise BackendError(str(exc)) from None
        self.api_key_source = "none (placeholder sent to --base_url)" if key == PLACEHOLDER_KEY else API_KEY_ENV
        policy = RetryPolicy(max_retries=s.max_retries, backoff_base=s.retry_backoff, backoff_max=max(60.0, s.retry_backoff))
        try:
            self.client = ChatClient(api_key=key, base_url=s.base_url, timeout=s.timeout, retry=policy)
        except Exception as exc:  # an unusable base_url, a missing openai package...
            raise BackendError(f"cannot create the OpenAI client for {s.base_url or 'the OpenAI API'}: {type(exc).__name__}: {exc}") from None
        self._probe()
        self._info = {
            "name": self.name,
            "api_model": s.api_model,
            "base_url": self.client.base_url,
            "api_key_source": self.api_key_source,
            "concurrency": s.concurrency,
            "max_retries": s.max_retries,
            "timeout": s.timeout,
            "retry_backoff": s.retry_backoff,
            "video_transport": s.video_transport,
            "frame_size": s.frame_size,
            "jpeg_quality": s.jpeg_quality if s.video_transport == "frames" else None,
            "image_detail": s.image_detail,
            "video_url": None if s.video_transport != "video_url" else (
                f"{s.video_url_base.rstrip('/')}/{{scene}}.mp4" if s.video_url_base else "data:video/mp4;base64 (the file itself)"),
            "video_fps": s.video_fps,
            "request_params": self._redacted_params(),
            "adjusted_flags": dict(self.adjustments),
            "generation": self.generation_settings(),
            "attn_implementation": None,
            "frames_resized_by": self._frames_resized_by(),
            "audio": {"part": "input_audio", "format": s.audio_format, "sampling_rate": self.audio_sampling_rate()} if s.audio else None,
            "usage": self._usage,  # live: filled in as the run goes (this invocation's calls)
        }

    def _frames_resized_by(self) -> str:
        s = self.settings
        if s.video_transport == "video_url":
            return "the server (video_url: the server samples and resizes the video)"
        if s.frame_size:
            return f"k9bench.video (qwen-vl-utils rules), then resized to exactly {s.frame_size}"
        return "k9bench.video (qwen-vl-utils rules)"

    def _probe(self) -> None:
        """List the server's models once: an unreachable server or a refused key stops the run here."""
        import openai

        s = self.settings
        where = s.base_url or "the OpenAI API"
        try:
            page = self.client.client.models.list()
            served = [getattr(m, "id", None) for m in getattr(page, "data", []) or []]
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise BackendError(f"cannot reach {where} ({type(exc).__name__}: {exc}); is the server up? (--base_url)") from None
        except openai.AuthenticationError:
            raise BackendError(f"{where} refused the API key (HTTP 401); check {_env_name()}") from None
        except Exception as exc:  # listing models is optional for some servers
            self._warn(f"could not list the models of {where} ({type(exc).__name__}); not checking that {s.api_model!r} is served")
            return
        if served and s.api_model not in served:
            shown = ", ".join(str(m) for m in served[:10]) + (" ..." if len(served) > 10 else "")
            self._warn(f"{s.api_model!r} is not among the models {where} lists ({shown}); requests may fail")

    def _warn(self, text: str) -> None:
        log.warning("%s", text)
        self.warnings.append(text)

    # ------------------------------------------------------------------ settings

    def generation_settings(self) -> dict[str, Any]:
        """The generation settings as sent (None: not sent, the server's default applies)."""
        s = self.settings
        return {
            "do_sample": s.do_sample,
            "max_new_tokens": s.max_new_tokens,
            "max_tokens_param": s.max_tokens_param,
            "temperature": self._temperature(),
            "top_p": s.top_p,
            "top_k": s.top_k,
            "seed_sent": s.send_seed,
        }

    def _temperature(self) -> float | None:
        s = self.settings
        if s.temperature is not None:
            return s.temperature
        return 0.0 if s.do_sample is False else None

    def _body_extras(self) -> dict:
        s = self.settings
        body: dict[str, Any] = {}
        if s.top_k is not None:
            body["top_k"] = s.top_k
        if s.video_transport == "video_url":
            body["mm_processor_kwargs"] = {"fps": s.fps, "do_sample_frames": True}
            body["media_io_kwargs"] = {"video": {"num_frames": s.max_frames}}
        return _merge(body, s.extra_body)

    def request_params(self, seed: int | None) -> dict[str, Any]:
        """Keyword arguments for ``chat.completions.create`` besides model and messages."""
        s = self.settings
        params: dict[str, Any] = {s.max_tokens_param: s.max_new_tokens}
        temperature = self._temperature()
        if temperature is not None:
            params["temperature"] = temperature
        if s.top_p is not None:
            params["top_p"] = s.top_p
        if s.send_seed and seed is not None:
            params["seed"] = seed
        extras = self._body_extras()
        if extras:
            params["extra_body"] = extras
        return params

    def _redacted_params(self) -> dict:
        params = self.request_params(0 if self.settings.send_seed else None)
        if "seed" in params:
            params["seed"] = "--seed"
        from k9bench.redact import redact

        return redact(params)  # a key inside --extra_body is written nowhere

    def describe(self) -> dict[str, Any]:
        return {**self._info, "warnings": self.warnings}

    def frame_patch_size(self) -> int | None:
        return None

    def audio_sampling_rate(self) -> int | None:
        """The rate soundtracks are read at under ``--audio`` (:data:`k9bench.audio.API_SAMPLING_RATE`), else None."""
        from k9bench.audio import API_SAMPLING_RATE

        return API_SAMPLING_RATE if self.settings.audio else None

    # ------------------------------------------------------------------ messages

    def render_prompt(self, messages: list[dict]) -> str:
        """The chat as sent, as JSON, with the video standing as ``{"type": "video"}``."""
        return json.dumps(self._api_messages(messages, None), ensure_ascii=False)

    def _api_messages(self, messages: list[dict], media: list[dict] | None) -> list[dict]:
        """Runner messages -> OpenAI messages: system text as a string, the video placeholder replaced by ``media``."""
        out: list[dict] = []
        for msg in messages:
            content = msg.get("content")
            if msg.get("role") == "system" and isinstance(content, list):
                text = "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
                out.append({"role": "system", "content": text})
                continue
            if not isinstance(content, list):
                out.append(dict(msg))
                continue
            parts: list[dict] = []
            for part in content:
                if part.get("type") == "video":
                    parts.extend(media if media is not None else [{"type": "video"}])
                else:
                    parts.append(dict(part))
            out.append({"role": msg.get("role", "user"), "content": parts})
        return out

    def _media_once(self, key: Any, owner: Any, build) -> list[dict]:
        """The media parts stored under ``key`` for ``owner``, built by ``build()`` only once even when
        several batches of the same video ask at the same time (the others wait for it)."""
        with self._media_lock:
            gate = self._media_gates.setdefault(key, threading.Lock())
        with gate:
            with self._media_lock:
                entry = self._media.get(key)
            if entry is not None:
                held = entry[0]() if isinstance(entry[0], weakref.ref) else entry[0]
                if held is owner or (isinstance(owner, Path) and held == owner):
                    return entry[1]
            parts = build()
            with self._media_lock:
                self._media[key] = (weakref.ref(owner) if not isinstance(owner, Path) else owner, parts)
                while len(self._media) > self.settings.concurrency + 2:  # the videos in flight, plus a few
                    self._media.pop(next(iter(self._media)))
            return parts

    def _forget_media(self, key: Any) -> None:
        # called by a weakref finalizer (any thread, maybe one holding _media_lock): single dict ops only
        self._media.pop(key, None)
        self._media_gates.pop(key, None)

    def _frame_parts(self, frames: "Frames") -> list[dict]:
        """One ``image_url`` part per frame, in order (encoded once for the questions of a video).

        The cache holds the frames weakly: an entry goes when the runner lets go of its video.
        """
        key = id(frames)
        created = []

        def build() -> list[dict]:
            created.append(True)
            return [{"type": "image_url", "image_url": self._image_url(url)} for url in encode_frames_jpeg(
                frames.frames, frame_size_tuple(self.settings.frame_size), self.settings.jpeg_quality)]

        parts = self._media_once(key, frames, build)
        if created:
            weakref.finalize(frames, self._forget_media, key)
        return parts

    def _image_url(self, url: str) -> dict:
        out = {"url": url}
        if self.settings.image_detail:
            out["detail"] = self.settings.image_detail
        return out

    def _video_path(self, request: GenerationRequest) -> Path:
        if not request.video_path:
            raise ApiCallError(f"idx {request.key}: the request names no video file (needed by --video_transport video_url)",
                               kind="client_error")
        return Path(request.video_path)

    def _video_parts(self, path: Path) -> list[dict]:
        """The one ``video_url`` part of ``path`` (built once for the questions of a video)."""

        def build() -> list[dict]:
            base = self.settings.video_url_base
            if base:
                url = f"{base.rstrip('/')}/{path.name}"
            else:
                try:
                    data = path.read_bytes()
                except OSError as exc:
                    raise ApiCallError(f"{path}: cannot read the video ({exc})", kind="client_error") from None
                url = "data:video/mp4;base64," + base64.b64encode(data).decode("ascii")
            return [{"type": "video_url", "video_url": {"url": url}}]

        return self._media_once(str(path), path, build)

    def _audio_parts(self, request: GenerationRequest) -> list[dict]:
        """The one ``input_audio`` part of the request's soundtrack (encoded once per video)."""
        from k9bench.audio import AudioError, input_audio_part

        audio = request.audio
        if audio is None:
            raise ApiCallError(f"idx {request.key}: --audio but no soundtrack was read for {request.video_path}", kind="client_error")
        key = ("audio", id(audio))
        created = []

        def build() -> list[dict]:
            created.append(True)
            try:
                return [input_audio_part(audio, self.settings.audio_format)]
            except AudioError as exc:
                raise ApiCallError(str(exc), kind="client_error") from None

        parts = self._media_once(key, audio, build)
        if created:
            weakref.finalize(audio, self._forget_media, key)
        return parts

    def _media_for(self, request: GenerationRequest) -> tuple[list[dict] | None, dict]:
        """The media parts of ``request`` and the record fields describing what was sent."""
        parts, fields = self._visual_media_for(request)
        if self.settings.audio and parts is not None:
            audio_parts = self._audio_parts(request)
            parts = [*parts, *audio_parts]  # the soundtrack after the frames
            fields["audio_sent"] = {"format": self.settings.audio_format, **request.audio.summary()}  # type: ignore[union-attr]
        return parts, fields

    def _visual_media_for(self, request: GenerationRequest) -> tuple[list[dict] | None, dict]:
        """The frame (or video) parts of ``request`` and the record fields describing what was sent."""
        if request.frames is None:
            return None, {"video_transport": None}
        if self.settings.video_transport == "video_url":
            parts = self._video_parts(self._video_path(request))
            s = self.settings
            return parts, {
                "video_transport": "video_url",
                # the server chose the frames: the local sampler's choice is not what the model saw
                "frame_indices": None, "num_frames": None, "sample_fps": None, "frame_size": None,
                "server_sampling": {"fps": s.fps, "max_frames": s.max_frames},
            }
        parts = self._frame_parts(request.frames)
        fields: dict[str, Any] = {"video_transport": "frames", "frames_sent": len(parts)}
        size = frame_size_tuple(self.settings.frame_size)
        if size is not None:
            fields["frame_size"] = [size[1], size[0]]  # [height, width], like the sampler's field
            fields["sampled_frame_size"] = [request.frames.height, request.frames.width]
        return parts, fields

    # ------------------------------------------------------------------ generation

    def _signature(self, request: GenerationRequest) -> str:
        return json.dumps([request.key, request.seed, request.messages], sort_keys=True, ensure_ascii=False)

    def generate(self, batch: list[GenerationRequest]) -> list[GenerationOutput]:
        from k9bench.openai_api import run_concurrent

        outcomes: dict[int, GenerationOutput | ApiCallError] = {}
        jobs: list[tuple[int, list[dict], dict, dict]] = []
        for pos, request in enumerate(batch):
            carried = self._carry.pop(request.key, None)
            if carried is not None and carried[0] == self._signature(request) and carried[1] is request.frames:
                outcomes[pos] = carried[2]
                continue
            try:
                media, fields = self._media_for(request)
            except ApiCallError as exc:
                outcomes[pos] = exc
                continue
            jobs.append((pos, self._api_messages(request.messages, media), self.request_params(request.seed), fields))

        def call(job: tuple[int, list[dict], dict, dict]) -> GenerationOutput | ApiCallError:
            pos, messages, params, fields = job
            return self._call(batch[pos], messages, params, fields)

        if len(jobs) == 1:
            outcomes[jobs[0][0]] = call(jobs[0])
        else:
            for job, outcome in run_concurrent(call, jobs, self.settings.concurrency):
                outcomes[job[0]] = outcome

        failures = {batch[pos].key: out for pos, out in outcomes.items() if isinstance(out, ApiCallError)}
        if failures:
            if len(batch) == 1:
                raise failures[batch[0].key]
            for pos, request in enumerate(batch):
                self._carry[request.key] = (self._signature(request), request.frames, outcomes[pos])
            raise BatchPartlyFailed(failures, len(batch))
        return [outcomes[pos] for pos in range(len(batch))]  # type: ignore[misc]

    def _call(self, request: GenerationRequest, messages: list[dict], params: dict, fields: dict) -> GenerationOutput | ApiCallError:
        """One chat call (with the client's retries); an :class:`ApiCallError` when it still fails."""
        s = self.settings
        with self._slots:
            result = self.client.chat(messages, model=s.api_model, label=f"idx {request.key}", **params)
        with self._lock:
            self._usage["retries"] += max(0, result.attempts - 1)
            if result.ok:
                self._usage["requests"] += 1
                self._usage["prompt_tokens"] += result.usage.prompt_tokens
                self._usage["completion_tokens"] += result.usage.completion_tokens
                self._usage["total_tokens"] += result.usage.total_tokens
                if result.model and result.model not in self._usage["served_models"]:
                    self._usage["served_models"].append(result.model)
            else:
                self._usage["failed_requests"] += 1
            self._unreachable_streak = self._unreachable_streak + 1 if (not result.ok and result.error_kind == "connection") else 0
            streak = self._unreachable_streak
        if streak >= self.unreachable_limit:
            raise BackendUnavailable(
                f"{streak} requests in a row could not connect to {s.base_url or 'the OpenAI API'} after their retries "
                f"(last: {result.error}); the server seems down, stopping instead of failing every remaining question"
            )
        if not result.ok:
            status = f" (HTTP {result.status_code})" if result.status_code else ""
            return ApiCallError(f"{result.error_kind}{status} after {result.attempts} attempt(s): {result.error}",
                                kind=result.error_kind, status_code=result.status_code, attempts=result.attempts)
        if result.text is not None and not isinstance(result.text, str):
            return ApiCallError(f"the server's reply content is a {type(result.text).__name__}, not text", kind="bad_response",
                                attempts=result.attempts)
        if not (result.text or "").strip():
            return ApiCallError(f"the server returned an empty reply (finish_reason={result.finish_reason!r})",
                                kind="empty_reply", attempts=result.attempts)
        usage = result.usage
        has_usage = usage.total_tokens > 0 or usage.prompt_tokens > 0
        extra = {
            **fields,
            "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                      "total_tokens": usage.total_tokens} if has_usage else None,
            "api_model": s.api_model,
            "api_served_model": result.model,
            "api_attempts": result.attempts,
            "api_elapsed_s": round(result.elapsed_s, 3),
        }
        return GenerationOutput(
            text=result.text or "",
            prompt=json.dumps(self._api_messages(request.messages, None), ensure_ascii=False),
            num_input_tokens=usage.prompt_tokens if has_usage else None,
            num_output_tokens=usage.completion_tokens if has_usage else None,
            finish_reason=result.finish_reason,
            extra=extra,
        )

    # ------------------------------------------------------------------ errors

    def is_out_of_memory(self, exc: BaseException) -> bool:
        """True for a request too large for the model's context (retried once with half the frames)."""
        if isinstance(exc, BatchPartlyFailed):
            return any(self.is_out_of_memory(e) for e in exc.failures.values())
        return (isinstance(exc, ApiCallError) and exc.kind == "client_error" and exc.status_code in (400, 413, 422)
                and bool(_CONTEXT_OVERFLOW.search(str(exc))))

    def recover_from_out_of_memory(self) -> None:
        pass  # nothing held on this side

    def max_batches_in_flight(self) -> int:
        """Batches the runner may keep generating at once: ``--concurrency`` (HTTP calls wait, they do not compute)."""
        return self.settings.concurrency

    def close(self) -> None:
        with self._media_lock:
            self._media.clear()
        self._carry.clear()
        inner = getattr(self.client, "client", None)
        if inner is not None and hasattr(inner, "close"):
            try:
                inner.close()
            except Exception:  # closing is best effort
                pass
        self.client = None


def _env_name() -> str:
    from k9bench.openai_api import API_KEY_ENV

    return API_KEY_ENV


def encode_frames_jpeg(frames: Any, size: tuple[int, int] | None = None, quality: int | None = None) -> list[str]:
    """uint8 (T, 3, H, W) frames -> ``data:image/jpeg;base64,...`` URLs, in order.

    ``size`` (width, height) resizes each frame to exactly that size first (bicubic, antialiased,
    as the sampler resizes). ``quality`` None: ``--jpeg_quality``'s default.
    """
    import io

    from k9bench.inference.settings import OpenAISettings
    from k9bench.settings import default_of

    if quality is None:
        quality = default_of(OpenAISettings, "jpeg_quality")

    from PIL import Image

    from k9bench.video import resize_frames

    if size is not None:
        frames = resize_frames(frames, size[1], size[0])
    array = frames.permute(0, 2, 3, 1).contiguous().numpy()
    urls = []
    for frame in array:
        buffer = io.BytesIO()
        Image.fromarray(frame).save(buffer, format="JPEG", quality=quality)
        urls.append("data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii"))
    return urls


__all__ = [
    "ApiCallError", "BatchPartlyFailed", "OpenAIBackend", "RequestSettings", "TRANSPORTS", "VIDEO_FPS_MAX_FRAMES",
    "encode_frames_jpeg", "frame_size_tuple", "parse_frame_size",
]
