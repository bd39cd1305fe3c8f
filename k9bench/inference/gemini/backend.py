"""``--backend gemini``: Gemini through its own SDK (``google-genai``) and its own video input.

Each video is uploaded once through the Files API (:mod:`k9bench.inference.gemini.uploads`: with
``--audio`` the file itself, otherwise a copy without its soundtrack), and every question about it sends
that file as a ``file_data`` part with ``video_metadata.fps`` = ``--fps`` (default 1: the paper's Gemini
rows), Gemini sampling the whole video itself, followed by the question; the system prompt is the
``system_instruction``. ``--max_new_tokens`` is ``max_output_tokens`` (Gemini 2.5 Pro always thinks, and
its thinking counts against it), ``--thinking_budget`` the ``thinking_config``'s budget; both are
recorded under ``generation``.

Each reply's finish reason is recorded (``api_finish_reason``, and ``finish_reason`` as ``stop``/``length``).
A reply with no text cut at the output limit (``MAX_TOKENS``, thinking used it up) is a failed record
``output_limit``, never an empty answer; a request Gemini refuses as too large is ``request_too_large``.
Calls are retried by the project's policy (:class:`k9bench.serving.openai_api.RetryPolicy`: ``--max_retries``,
``--retry_backoff``) on 408, 429, 5xx, timeouts and dropped connections; the SDK's own retries stay off.

The key comes from ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``) only, is registered with :mod:`k9bench.redact`
and written nowhere; ``--base_url`` sets the SDK's endpoint (``http_options.base_url``). The
``genai.Client`` is kept in :attr:`GeminiBackend.client` for the whole run: a client nothing references is
closed under a call in flight (SPEC section 11).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from typing import Any, Callable

from k9bench.inference.backend import Backend, BackendError, BackendUnavailable, GenerationOutput, GenerationRequest
from k9bench.inference.records import OUTPUT_LIMIT, REQUEST_TOO_LARGE, ClassedFailure, is_size_refusal
from k9bench.inference.settings import RunConfig
from k9bench.serving.openai_api import MAX_REPLY_CHARS

log = logging.getLogger(__name__)

RETRIED_STATUSES = (408, 429, 500, 502, 503, 504)
"""HTTP statuses a call is retried on (Gemini's documented transient errors)."""

LOCAL_CHECK_FRAMES = 2
"""Frames decoded here per video: a check that the file decodes (the model gets the file, sampled by Gemini)."""

FINISH_REASONS = {"STOP": "stop", "MAX_TOKENS": "length"}
"""Gemini's finish reasons in the records' own words (others are kept lower-cased)."""


def _value(enum_or_text: Any) -> str | None:
    if enum_or_text is None:
        return None
    return str(getattr(enum_or_text, "value", enum_or_text))


class GeminiBackend(Backend):
    """Gemini's SDK, videos through the Files API (see the module doc)."""

    name = "gemini"

    def __init__(self, config: RunConfig) -> None:
        if config.generation.max_new_tokens is None:
            raise BackendError("max_new_tokens is not resolved (build the config with k9bench.inference.settings.resolve)")
        from k9bench.inference.planning import output_path

        self.settings = config.gemini
        self.api = config.openai  # the API flags both backends take (the registry row's also_reads): --base_url, --concurrency...
        self.model = config.model.model_name_or_path
        self.generation = config.generation
        self.fps = config.frames.fps
        self.audio = config.frames.audio
        self.output = output_path(config)
        self.client: Any = None
        self.uploads: Any = None
        self.warnings: list[str] = []
        self._lock = threading.Lock()
        self._rng = random.Random()
        self._unreachable_streak = 0
        self._usage = {"prompt_tokens": 0, "completion_tokens": 0, "thoughts_tokens": 0, "total_tokens": 0, "requests": 0,
                       "failed_requests": 0, "retries": 0, "model_versions": []}
        self._info: dict[str, Any] = {}

    # ------------------------------------------------------------------ loading

    def load(self) -> None:
        from google import genai
        from google.genai import types

        from k9bench.inference.gemini.settings import api_key, missing_key
        from k9bench.inference.gemini.uploads import Uploads, ledger_path
        from k9bench.redact import register_secret
        from k9bench.serving.openai_api import RetryPolicy

        found = api_key()
        if found is None:
            raise BackendError(missing_key() or "no API key")
        key, source = found
        register_secret(key)
        s, api = self.settings, self.api
        self.policy = RetryPolicy(max_retries=api.max_retries, backoff_base=api.retry_backoff, backoff_max=max(60.0, api.retry_backoff))
        options = types.HttpOptions(timeout=int(api.timeout * 1000), base_url=api.base_url)
        try:
            self.client = genai.Client(api_key=key, vertexai=False, http_options=options)
        except Exception as exc:
            raise BackendError(f"cannot create the Gemini client: {type(exc).__name__}: {exc}") from None
        endpoint = api.base_url or "https://generativelanguage.googleapis.com/"
        served = self._probe(endpoint)
        self.uploads = Uploads(self.client, self.call, ledger=ledger_path(self.output), endpoint=endpoint,
                               timeout=s.upload_timeout, poll_interval=s.upload_poll_interval)
        self._info = {
            "name": self.name,
            "api_model": self.model,
            "base_url": endpoint,
            "api_key_source": source,
            "sdk": f"google-genai {genai.__version__}",
            "served_model": served,
            "concurrency": api.concurrency,
            "max_retries": api.max_retries,
            "timeout": api.timeout,
            "retry_backoff": api.retry_backoff,
            "video_transport": "gemini_file",
            "video": {"sent_as": "the video file (Files API)", "variant": "audio+video" if self.audio else "video only (soundtrack removed)",
                      "video_metadata_fps": self.fps, "sampled_by": "Gemini"},
            "upload_ledger": str(ledger_path(self.output)),
            "delete_uploads": s.delete_uploads,
            "generation": self.generation_settings(),
            "attn_implementation": None,
            "uploads": self.uploads.counts,  # live
            "usage": self._usage,  # live
        }

    def _probe(self, endpoint: str) -> dict | None:
        """Ask for the model once: an unreachable endpoint, a refused key or an unknown model stops the run here."""
        import httpx2 as httpx
        from google.genai import errors

        try:
            model = self.call(f"models.get {self.model}", lambda: self.client.models.get(model=self.model))
        except errors.ClientError as exc:
            raise BackendError(f"{endpoint} refused models.get {self.model!r}: HTTP {exc.code} {exc.status}: {exc.message}") from None
        except (BackendUnavailable, httpx.TransportError) as exc:
            raise BackendError(f"cannot reach {endpoint} (models.get {self.model!r}: {_describe_error(exc)}); is it up? "
                               "(--base_url)") from None
        except errors.APIError as exc:
            raise BackendError(f"{endpoint} failed models.get {self.model!r}: HTTP {exc.code} {exc.status}: {exc.message}") from None
        return {"name": model.name, "version": model.version, "input_token_limit": model.input_token_limit,
                "output_token_limit": model.output_token_limit}

    def generation_settings(self) -> dict[str, Any]:
        """What each request's generation config says (None: not sent, Gemini's default applies)."""
        g = self.generation
        temperature = g.temperature if g.temperature is not None else (0.0 if g.do_sample is False else None)
        return {"do_sample": g.do_sample, "max_new_tokens": g.max_new_tokens, "max_tokens_param": "max_output_tokens",
                "temperature": temperature, "top_p": g.top_p, "top_k": g.top_k, "seed_sent": True,
                "thinking_budget": self.settings.thinking_budget}

    def describe(self) -> dict[str, Any]:
        return {**self._info, "warnings": self.warnings}

    def audio_sampling_rate(self) -> int | None:
        """Under ``--audio`` the soundtrack is read (to find videos without one) at the API rate; Gemini hears the file's own."""
        from k9bench.video.audio import API_SAMPLING_RATE

        return API_SAMPLING_RATE if self.audio else None

    def sampling_overrides(self) -> dict[str, Any]:
        """Gemini samples each file itself: here :data:`LOCAL_CHECK_FRAMES` frames only check that it decodes."""
        return {"max_frames": LOCAL_CHECK_FRAMES}

    def max_batches_in_flight(self) -> int:
        return self.api.concurrency

    def run_stats(self) -> dict[str, Any]:
        return {"uploads": dict(self.uploads.counts)} if self.uploads is not None else {}

    # ------------------------------------------------------------------ calls

    def call(self, label: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` (one SDK call) retried on 408/429/5xx, timeouts and dropped connections, per :attr:`policy`.
        Raises the last error; :class:`BackendUnavailable` after too many calls in a row could not connect."""
        import httpx2 as httpx
        from google.genai import errors

        from k9bench.serving.openai_api import parse_retry_after

        attempt = 0
        while True:
            attempt += 1
            try:
                result = fn()
                with self._lock:
                    self._unreachable_streak = 0
                return result
            except (errors.APIError, httpx.TransportError) as exc:
                status = exc.code if isinstance(exc, errors.APIError) else None
                unreachable = isinstance(exc, httpx.TransportError) and not isinstance(exc, httpx.TimeoutException)
                retryable = status in RETRIED_STATUSES or isinstance(exc, httpx.TransportError)
                if not retryable or attempt > self.policy.max_retries:
                    if unreachable:
                        self._note_unreachable(exc)
                    raise
                headers = getattr(getattr(exc, "response", None), "headers", None)
                with self._lock:
                    wait = self.policy.delay(attempt, parse_retry_after(headers) if headers else None, self._rng)
                    self._usage["retries"] += 1
                log.warning("%s: %s on attempt %d/%d; retrying in %.2f s", label, _describe_error(exc), attempt,
                            self.policy.max_retries + 1, wait)
                time.sleep(wait)

    def _note_unreachable(self, exc: BaseException) -> None:
        with self._lock:
            self._unreachable_streak += 1
            streak = self._unreachable_streak
        limit = max(10, 3 * self.api.concurrency)
        if streak >= limit:
            raise BackendUnavailable(f"{streak} calls in a row could not connect to {self.api.base_url or 'the Gemini API'} "
                                     f"after their retries (last: {_describe_error(exc)}); stopping") from None

    # ------------------------------------------------------------------ messages

    def render_prompt(self, messages: list[dict]) -> str:
        """The request as sent, as JSON, with the video standing as ``{"type": "video"}``."""
        system, contents = self._contents(messages, None)
        return json.dumps({"system_instruction": system, "contents": contents}, ensure_ascii=False)

    def _contents(self, messages: list[dict], video: Any) -> tuple[str | None, list[dict]]:
        """``(system instruction, contents)`` of the runner's messages; ``video`` replaces the placeholder (None: kept)."""
        system: str | None = None
        contents: list[dict] = []
        for msg in messages:
            content = msg.get("content")
            parts = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
            if msg.get("role") == "system":
                system = "\n".join(p.get("text", "") for p in parts if p.get("type") == "text") or None
                continue
            out = []
            for part in parts:
                if part.get("type") == "video":
                    out.append(video if video is not None else {"type": "video"})
                elif part.get("text"):
                    out.append({"text": part["text"]})
            contents.append({"role": "model" if msg.get("role") == "assistant" else "user", "parts": out})
        return system, contents

    # ------------------------------------------------------------------ generation

    def generate(self, batch: list[GenerationRequest]) -> list[GenerationOutput]:
        """One call per question (the runner reruns a failed batch question by question)."""
        if len(batch) == 1:
            return [self._answer(batch[0])]
        from k9bench.serving.openai_api import run_concurrent

        outputs = dict(run_concurrent(lambda pos: self._answer(batch[pos]), range(len(batch)), self.api.concurrency))
        return [outputs[pos] for pos in range(len(batch))]

    def _config(self, system: str | None, seed: int) -> Any:
        from google.genai import types

        g = self.generation_settings()
        thinking = types.ThinkingConfig(thinking_budget=g["thinking_budget"]) if g["thinking_budget"] is not None else None
        return types.GenerateContentConfig(system_instruction=system, max_output_tokens=g["max_new_tokens"], temperature=g["temperature"],
                                           top_p=g["top_p"], top_k=g["top_k"], seed=seed, thinking_config=thinking,
                                           automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))

    def _answer(self, request: GenerationRequest) -> GenerationOutput:
        from google.genai import errors

        from k9bench.inference.gemini.uploads import UploadFailed

        video_part = sent = None
        if request.video_path is not None:
            try:
                entry = self.uploads.file_for(request.video_path, audio=self.audio)
            except (UploadFailed, errors.APIError) as exc:
                raise ClassedFailure(f"upload of {request.video_path} failed: {_describe_error(exc)}", "generation_error") from None
            video_part = {"file_data": {"file_uri": entry["uri"], "mime_type": entry["mime_type"]}, "video_metadata": {"fps": self.fps}}
            sent = {"file": entry["name"], "variant": entry["variant"], "video_metadata_fps": self.fps}
        system, contents = self._contents(request.messages, video_part)
        started = time.monotonic()
        try:
            response = self.call(f"idx {request.key}", lambda: self.client.models.generate_content(
                model=self.model, contents=contents, config=self._config(system, request.seed)))
        except errors.APIError as exc:
            with self._lock:
                self._usage["failed_requests"] += 1
            text = _describe_error(exc)
            error_class = REQUEST_TOO_LARGE if exc.code == 413 or is_size_refusal(text) else "generation_error"
            raise ClassedFailure(text, error_class) from None
        return self._output(request, response, sent, time.monotonic() - started)

    def _output(self, request: GenerationRequest, response: Any, sent: dict | None, elapsed: float) -> GenerationOutput:
        candidate = (response.candidates or [None])[0]
        finish = _value(getattr(candidate, "finish_reason", None))
        text = response.text if candidate is not None else None
        usage = response.usage_metadata
        counts = {"prompt_tokens": getattr(usage, "prompt_token_count", None) or 0,
                  "completion_tokens": getattr(usage, "candidates_token_count", None) or 0,
                  "thoughts_tokens": getattr(usage, "thoughts_token_count", None) or 0,
                  "total_tokens": getattr(usage, "total_token_count", None) or 0}
        with self._lock:
            self._usage["requests"] += 1
            for name, value in counts.items():
                self._usage[name] += value
            version = response.model_version
            if version and version not in self._usage["model_versions"]:
                self._usage["model_versions"].append(version)
        if not (text or "").strip():
            if finish == "MAX_TOKENS":
                raise ClassedFailure(f"empty reply cut at the output limit (finish_reason MAX_TOKENS, {counts['thoughts_tokens']} "
                                     f"thinking tokens of --max_new_tokens {self.generation.max_new_tokens}): raise "
                                     "--max_new_tokens or lower --thinking_budget", OUTPUT_LIMIT)
            raise ClassedFailure(f"empty reply (finish_reason {finish})", "generation_error")
        extra = {"usage": counts, "api_model": self.model, "api_served_model": response.model_version, "api_finish_reason": finish,
                 "api_elapsed_s": round(elapsed, 3), "video_transport": "gemini_file", "video_sent": sent}
        if len(text) > MAX_REPLY_CHARS:  # the OpenAI-compatible route's cap: a longer reply is cut before anything scans it
            log.warning("idx %s: the reply is %d characters, over the %d-character cap; its first %d are kept (api_reply_chars)",
                        request.key, len(text), MAX_REPLY_CHARS, MAX_REPLY_CHARS)
            extra["api_reply_chars"] = len(text)
            text = text[:MAX_REPLY_CHARS]
        if sent is not None:  # Gemini samples the file itself: the frames sampled here are not what it saw
            extra.update({"frame_indices": None, "num_frames": None, "sample_fps": None, "frame_size": None})
        return GenerationOutput(text=text or "", prompt=self.render_prompt(request.messages),
                                num_input_tokens=counts["prompt_tokens"] or None, num_output_tokens=counts["completion_tokens"] or None,
                                finish_reason=FINISH_REASONS.get(finish or "", (finish or "").lower() or None), extra=extra)

    def close(self) -> None:
        if self.uploads is not None:
            self.uploads.close(delete=self.settings.delete_uploads)
            counts = self.uploads.counts
            log.info("gemini uploads: %d uploaded, %d reused, %d uploaded again (expired), %d deleted",
                     counts["uploaded"], counts["reused"], counts["uploaded_again"], counts["deleted"])
        if self.client is not None:
            try:
                self.client.close()
            except Exception:  # closing is best effort
                pass
        self.client = None


def _describe_error(exc: BaseException) -> str:
    from google.genai import errors

    if isinstance(exc, errors.APIError):
        return f"HTTP {exc.code} {exc.status or ''}: {exc.message}".replace("  ", " ")
    return f"{type(exc).__name__}: {exc}"


__all__ = ["FINISH_REASONS", "GeminiBackend", "LOCAL_CHECK_FRAMES", "RETRIED_STATUSES"]
