"""The request side of the OpenAI-compatible backend: the settings each request is built from, and
the errors a call can end in (see :mod:`k9bench.inference.openai_compat.backend`)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from k9bench.inference.settings import RunConfig

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
    """``auto``, ``frames``, ``video`` or ``video_url`` (``auto`` is resolved by :meth:`OpenAIBackend.load`)."""
    video_crf: int | None
    """``video``: None for the lossless mp4, else libx264's CRF (``--video_crf``)."""
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
    max_request_bytes: int | None = None
    """``--max_request_mb`` in bytes: a larger request is a failed record ``request_too_large``, never sent (None: no cap)."""
    stream: bool = False
    """``--stream``: replies are asked for streamed and assembled (:mod:`k9bench.serving.streaming`)."""
    one_modality_per_message: bool = False
    """``--one_modality_per_message``: with ``--audio`` the soundtrack travels in the video file (``video_url``), no ``input_audio``."""

    @classmethod
    def from_config(cls, config: RunConfig) -> "RequestSettings":
        o, g, f = config.openai, config.generation, config.frames
        return cls(
            api_model=o.api_model or config.model.model_name_or_path, base_url=o.base_url, concurrency=o.concurrency,
            max_retries=o.max_retries, timeout=o.timeout, retry_backoff=o.retry_backoff, video_transport=o.video_transport,
            video_crf=o.video_crf, frame_size=o.frame_size, jpeg_quality=o.jpeg_quality, image_detail=o.image_detail, video_url_base=o.video_url_base,
            video_fps=o.video_fps, fps=f.fps, max_frames=f.max_frames, max_new_tokens=g.max_new_tokens,
            max_tokens_param=o.max_tokens_param, do_sample=g.do_sample, temperature=g.temperature, top_p=g.top_p, top_k=g.top_k,
            send_seed=not o.no_seed_param, extra_body=dict(o.extra_body or {}), audio=f.audio, audio_format=o.audio_format,
            max_request_bytes=int(o.max_request_mb * MIB), stream=o.stream, one_modality_per_message=o.one_modality_per_message,
        )


MIB = 1 << 20
"""Bytes in the MiB of ``--max_request_mb``."""


def request_bytes(model: str, messages: list[dict], params: dict) -> int:
    """The size of a chat request's JSON body before it is sent: ``model``, ``messages`` and ``params`` (what
    ``chat.completions.create`` takes; ``extra_body`` merged into the body), compact UTF-8 JSON."""
    body = {"model": model, "messages": messages, **{k: v for k, v in params.items() if k != "extra_body"}}
    if body.get("stream"):  # what ChatClient.chat adds to a streamed request
        from k9bench.serving.streaming import STREAM_OPTIONS

        body["stream_options"] = dict(STREAM_OPTIONS)
    body.update(params.get("extra_body") or {})
    return len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def modality_problem(config: RunConfig) -> str | None:
    """The one line refusing what an API of one non-text modality per message (``--one_modality_per_message``: Qwen-Omni's)
    cannot take, or None (the registry row's ``check``, before any work)."""
    o, f = config.openai, config.frames
    if not o.one_modality_per_message or f.text_only:
        return None
    if f.audio and o.video_transport != "video_url":
        return ("--one_modality_per_message: --audio would send the frames and an input_audio part in one message, which the API "
                "refuses; send the video file itself, whose soundtrack the model hears: --video_transport video_url")
    if not f.audio and o.video_transport == "video_url":
        return ("--one_modality_per_message: --video_transport video_url sends the file with its soundtrack, which the model "
                "would hear; for video only use --video_transport frames or video")
    return None


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
        """``rate_limit``, ``server_error``, ``timeout``, ``connection``, ``bad_response``, ``client_error``, ``empty_reply``
        or ``request_too_large``."""
        self.status_code = status_code
        """HTTP status of the last failed attempt, when there was one."""
        self.attempts = attempts
        """HTTP attempts made."""

    @property
    def error_class(self) -> str:
        """The record's ``error_class``: ``request_too_large`` for a request over the cap or refused as too large."""
        from k9bench.inference.records import REQUEST_TOO_LARGE

        return REQUEST_TOO_LARGE if self.kind == REQUEST_TOO_LARGE else "generation_error"


class BatchPartlyFailed(RuntimeError):
    """Some requests of a batch failed; the runner reruns the batch question by question."""

    def __init__(self, failures: dict[int, ApiCallError], total: int):
        self.failures = failures
        """Question idx -> its error."""
        first = next(iter(failures.values()))
        super().__init__(f"{len(failures)} of {total} request(s) failed (first: {first})")


__all__ = ["ApiCallError", "BatchPartlyFailed", "MIB", "RequestSettings", "modality_problem", "request_bytes"]
