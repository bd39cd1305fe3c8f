"""The request side of the OpenAI-compatible backend: the settings each request is built from, and
the errors a call can end in (see :mod:`k9bench.inference.openai_compat.backend`)."""

from __future__ import annotations

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


__all__ = ["ApiCallError", "BatchPartlyFailed", "RequestSettings"]
