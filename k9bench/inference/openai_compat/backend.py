"""The OpenAI-compatible backend (``eval_video_llm.py --backend openai``).

Any chat-completions server works: the OpenAI API (GPT-4o), Gemini's or another vendor's
OpenAI-compatible endpoint, or a self-hosted ``vllm serve`` / SGLang server (``--base_url``).
The prompt, answer extraction, raw artifact, checkpoints and resume are the shared runner's
(:mod:`k9bench.inference.runner`), exactly as for the transformers backend; this module only
turns one request into one HTTP call.

How the video travels (``--video_transport``; :mod:`k9bench.inference.openai_compat.video_transport` builds the parts):
``frames`` sends each sampled frame as a JPEG image part (any vision API: GPT-4o); ``video`` sends exactly
the sampled frames as one short mp4 played at their true times, so a Qwen-VL model merges them in time
and reads their timestamps as the transformers backend gives them; ``video_url`` sends the file and lets
the server sample it. ``auto`` (the default) picks ``video`` when the server says it is vLLM or SGLang
(``owned_by`` in ``/v1/models``) and ``frames`` otherwise; the choice and why go into the record
(``inference.backend.video_transport``, ``video_transport_chosen``). With ``video`` the frames are
sampled for the served checkpoint's patch size (read from its processor config), as the transformers
backend samples them, so the model gets the same number of video tokens.

What the server says about itself (``/v1/models``, ``/version``, each response's ``system_fingerprint``)
goes into ``inference.backend.server`` (:mod:`k9bench.inference.openai_compat.server_info` lists the keys).

Concurrency: the runner keeps up to ``--concurrency`` batches in flight
(:meth:`OpenAIBackend.max_batches_in_flight`), started video by video in dataset order, so the
requests about one video are sent next to each other and a server's prefix cache can reuse
the video; the requests of a batch (``--batch_size``, default 1) go out together. At most
``--concurrency`` HTTP calls are in flight over all batches. Each call is retried by
:class:`k9bench.serving.openai_api.ChatClient` (429, 5xx, timeouts, broken bodies; Retry-After honoured).
When some requests of a batch still fail, ``generate`` raises so that the runner reruns the
batch question by question; the answers already received are handed back then without a
second call, and the failures are raised again at once, so each question costs one call
(plus its retries) and a failure becomes a record with ``error``.

With ``--audio`` (frames transport only) each video's soundtrack, read once per video at
:data:`k9bench.video.audio.API_SAMPLING_RATE` (16 kHz mono), follows the frames as exactly one
``{"type": "input_audio", "input_audio": {"data": <base64>, "format": "wav"|"mp3"}}`` part
(``--audio_format``; Gemini's OpenAI-compatible endpoint takes it), encoded once per video.

The key is read from ``OPENAI_API_KEY`` only (a ``--base_url`` server that needs none gets a
placeholder), is scrubbed from every error text, and is written nowhere.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from typing import Any

from k9bench.inference.backend import Backend, BackendError, BackendUnavailable, GenerationOutput, GenerationRequest
from k9bench.inference.openai_compat.request import MIB, ApiCallError, BatchPartlyFailed, RequestSettings, _merge, request_bytes
from k9bench.inference.openai_compat.server_info import empty_server_block, note_fingerprint
from k9bench.inference.openai_compat.settings import TRANSPORTS, VIDEO_FPS_MAX_FRAMES, frame_size_tuple, parse_frame_size
from k9bench.inference.records import REQUEST_TOO_LARGE, is_size_refusal
from k9bench.inference.settings import RunConfig
from k9bench.inference.openai_compat.video_transport import encode_frames_jpeg, mp4_codec

log = logging.getLogger(__name__)

_CONTEXT_OVERFLOW = re.compile(
    r"context[ _]length|maximum context|context window|too many tokens|prompt is too long|too long for the model"
    r"|exceeds? the (?:model'?s? )?(?:maximum|max)",
    re.IGNORECASE,
)


# --------------------------------------------------------------------------- the backend


class OpenAIBackend(Backend):
    """Chat completions over HTTP (see the module doc)."""

    name = "openai"

    def __init__(self, config: RunConfig):
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
        if o.video_transport in ("video_url", "video") and o.frame_size:
            warnings.append(f"--frame_size has no effect with --video_transport {o.video_transport} (frames keep the sampled size)")
        if o.video_transport != "video_url" and o.video_url_base:
            warnings.append("--video_url_base has no effect unless --video_transport video_url")
        if o.video_crf is not None and o.video_transport not in ("video", "auto"):
            warnings.append(f"--video_crf has no effect with --video_transport {o.video_transport} (it sets the video transport's mp4)")
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
                       "failed_requests": 0, "retries": 0, "requests_over_size": 0, "served_models": []}
        self._info: dict[str, Any] = {}
        self.server: dict[str, Any] = empty_server_block()
        """``inference.backend.server`` (live: fingerprints are added as responses come)."""
        self.transport_chosen = "as asked (--video_transport)"
        self._patch_size: int | None = None
        self._video_pixel_budget: int | None = None  # the served processor's T x H x W budget (video transport)
        self._budget_warned: set[str] = set()
        self.media = None  # the MediaBuilder, once the transport is known (load)
        self._slots = threading.BoundedSemaphore(max(1, settings.concurrency))  # HTTP calls in flight, over all batches
        self._carry: dict[int, tuple[str, Any, GenerationOutput | ApiCallError]] = {}
        self._unreachable_streak = 0  # requests in a row that could not connect
        self.unreachable_limit = max(10, 3 * max(1, settings.concurrency))
        """Requests in a row that could not connect (after their retries) before the run stops."""

    # ------------------------------------------------------------------ loading

    def load(self) -> None:
        from k9bench.serving.openai_api import API_KEY_ENV, MAX_REPLY_CHARS, ChatClient, MissingApiKey, RetryPolicy, resolve_api_key
        from k9bench.serving.endpoint import PLACEHOLDER_KEY

        s = self.settings
        try:
            key = resolve_api_key(s.base_url)
        except MissingApiKey as exc:
            raise BackendError(str(exc)) from None
        self.api_key_source = "none (placeholder sent to --base_url)" if key == PLACEHOLDER_KEY else API_KEY_ENV
        policy = RetryPolicy(max_retries=s.max_retries, backoff_base=s.retry_backoff, backoff_max=max(60.0, s.retry_backoff))
        try:
            self.client = ChatClient(api_key=key, base_url=s.base_url, timeout=s.timeout, retry=policy,
                                     max_reply_chars=MAX_REPLY_CHARS)  # a longer reply is cut before anything scans it
        except Exception as exc:  # an unusable base_url, a missing openai package...
            raise BackendError(f"cannot create the OpenAI client for {s.base_url or 'the OpenAI API'}: {type(exc).__name__}: {exc}") from None
        models = self._probe()
        self._describe_server(models, key)
        self._choose_transport()
        s = self.settings
        from k9bench.inference.openai_compat.video_transport import MediaBuilder

        self.media = MediaBuilder(
            transport=s.video_transport, frame_size=frame_size_tuple(s.frame_size), jpeg_quality=s.jpeg_quality,
            image_detail=s.image_detail, video_url_base=s.video_url_base, fps=s.fps, max_frames=s.max_frames,
            audio=s.audio, audio_format=s.audio_format, keep=s.concurrency + 2,
            video_crf=s.video_crf, audio_in_file=s.one_modality_per_message and s.video_transport == "video_url")
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
            "video_transport_chosen": self.transport_chosen,
            "video_codec": mp4_codec(s.video_crf) if s.video_transport == "video" else None,
            "frame_patch_size": self._patch_size,
            "server_video_pixel_budget": self._video_pixel_budget,
            "frame_size": s.frame_size,
            "jpeg_quality": s.jpeg_quality if s.video_transport == "frames" else None,
            "image_detail": s.image_detail,
            "video_url": None if s.video_transport != "video_url" else (
                f"{s.video_url_base.rstrip('/')}/{{scene}}.mp4" if s.video_url_base else "data:video/mp4;base64 (the file itself)"),
            "video_fps": s.video_fps,
            "max_request_bytes": s.max_request_bytes,
            "stream": s.stream,
            "one_modality_per_message": s.one_modality_per_message,
            "request_params": self._redacted_params(),
            "adjusted_flags": dict(self.adjustments),
            "generation": self.generation_settings(),
            "attn_implementation": None,
            "frames_resized_by": self._frames_resized_by(),
            "audio": ({"part": "the video file's own soundtrack (video_url)"} if self.media.audio_in_file else
                      {"part": "input_audio", "format": s.audio_format, "sampling_rate": self.audio_sampling_rate()}) if s.audio else None,
            "usage": self._usage,  # live: filled in as the run goes (this invocation's calls)
            "server": self.server,  # live: response fingerprints are added
        }

    def _describe_server(self, models: list[Any] | None, key: str) -> None:
        """Fill :attr:`server` from the listing and (for a ``--base_url`` server) ``/version``."""
        from k9bench.inference.openai_compat.server_info import read_version, server_block

        s = self.settings
        version = read_version(self.client.base_url, key, timeout=min(10.0, s.timeout)) if s.base_url else None
        self.server.update(server_block(models, s.api_model, version))
        if self.server["root"] is not None and self.server["root"] != s.api_model:
            log.info("%s serves %r from the checkpoint %s", s.base_url, s.api_model, self.server["root"])

    def _choose_transport(self) -> None:
        """Resolve ``--video_transport auto``; with ``video``, find the served checkpoint's patch size."""
        import dataclasses

        from k9bench.inference.openai_compat.server_info import checkpoint_video_processor

        s = self.settings
        if s.video_transport == "auto":
            engine = self.server["engine"]
            chosen = "video" if engine else "frames"
            self.transport_chosen = (f"auto: {chosen} (the server is {engine})" if engine else
                                     "auto: frames (the server does not say it is vLLM or SGLang)")
            log.info("--video_transport %s", self.transport_chosen)
            self.settings = s = dataclasses.replace(s, video_transport=chosen)
        if s.video_transport == "video":
            video_processor, source = checkpoint_video_processor(self.server["root"])
            patch = video_processor["patch_size"] if video_processor else None
            self._video_pixel_budget = video_processor["max_pixels"] if video_processor else None
            if patch is None:
                self._warn(f"--video_transport video: {source}; frames are sampled for patch size 14 (qwen-vl-utils' default), "
                           "and the server's processor may resize them again")
            else:
                log.info("--video_transport video: frames sampled for patch size %d (%s)", patch, source)
            self._patch_size = patch
            from k9bench.inference.openai_compat.video_transport import LOADER_DEFAULT_FRAMES, PROCESSOR_FPS

            if s.max_frames > LOADER_DEFAULT_FRAMES and self.server["engine"] == "vllm":
                self._warn(f"--max_frames {s.max_frames}: vLLM keeps at most {LOADER_DEFAULT_FRAMES} frames of a video unless it is "
                           "served with --media-io-kwargs '{\"video\": {\"num_frames\": -1}}' (docs/vllm.md)")
            if s.fps > PROCESSOR_FPS:
                self._warn(f"--fps {s.fps:g}: a Qwen3-VL processor samples a video again at {PROCESSOR_FPS:g} fps, "
                           "so the model may see fewer frames than were sent")

    def _frames_resized_by(self) -> str:
        s = self.settings
        if s.video_transport == "video_url":
            return "the server (video_url: the server samples and resizes the video)"
        if s.video_transport == "video":
            return f"k9bench.video (qwen-vl-utils rules, patch size {self._patch_size or 'qwen-vl-utils default'}), sent as one mp4"
        if s.frame_size:
            return f"k9bench.video (qwen-vl-utils rules), then resized to exactly {s.frame_size}"
        return "k9bench.video (qwen-vl-utils rules)"

    def _probe(self) -> list[Any] | None:
        """List the server's models once (returned; None when it cannot list them): an unreachable
        server or a refused key stops the run here."""
        import openai

        s = self.settings
        where = s.base_url or "the OpenAI API"
        try:
            page = self.client.client.models.list()
            listed = list(getattr(page, "data", []) or [])
            served = [getattr(m, "id", None) for m in listed]
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise BackendError(f"cannot reach {where} ({type(exc).__name__}: {exc}); is the server up? (--base_url)") from None
        except openai.AuthenticationError:
            raise BackendError(f"{where} refused the API key (HTTP 401); check {_env_name()}") from None
        except Exception as exc:  # listing models is optional for some servers
            self._warn(f"could not list the models of {where} ({type(exc).__name__}); not checking that {s.api_model!r} is served")
            return None
        if served and s.api_model not in served:
            shown = ", ".join(str(m) for m in served[:10]) + (" ..." if len(served) > 10 else "")
            self._warn(f"{s.api_model!r} is not among the models {where} lists ({shown}); requests may fail")
        return listed

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
        return body

    def request_params(self, seed: int | None, media_body: dict | None = None) -> dict[str, Any]:
        """Keyword arguments for ``chat.completions.create`` besides model and messages; ``media_body``:
        the transport's fields for this request's video (``media_io_kwargs``); ``--extra_body`` wins over both."""
        s = self.settings
        params: dict[str, Any] = {s.max_tokens_param: s.max_new_tokens}
        temperature = self._temperature()
        if temperature is not None:
            params["temperature"] = temperature
        if s.top_p is not None:
            params["top_p"] = s.top_p
        if s.send_seed and seed is not None:
            params["seed"] = seed
        extras = _merge(_merge(self._body_extras(), media_body or {}), s.extra_body)
        if extras:
            params["extra_body"] = extras
        return params

    def _redacted_params(self) -> dict:
        s = self.settings
        media = {}
        if s.video_transport == "video_url":
            media = {"media_io_kwargs": {"video": {"num_frames": s.max_frames, "fps": s.fps}}}
        params = self.request_params(0 if s.send_seed else None, media)
        if "seed" in params:
            params["seed"] = "--seed"
        from k9bench.redact import redact

        return redact(params)  # a key inside --extra_body is written nowhere

    def describe(self) -> dict[str, Any]:
        return {**self._info, "warnings": self.warnings}

    def frame_patch_size(self) -> int | None:
        """With ``video``: the served checkpoint's patch size (frames sampled as the transformers backend samples them)."""
        return self._patch_size if self.settings.video_transport == "video" else None

    def audio_sampling_rate(self) -> int | None:
        """The rate soundtracks are read at under ``--audio`` (:data:`k9bench.video.audio.API_SAMPLING_RATE`), else None."""
        from k9bench.video.audio import API_SAMPLING_RATE

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

    def _media_for(self, request: GenerationRequest) -> tuple[list[dict] | None, dict, dict]:
        """The media parts of ``request``, the record fields saying what was sent, and its body fields."""
        from k9bench.inference.openai_compat.video_transport import MediaError

        try:
            parts, fields, body = self.media.parts_for(request)
        except MediaError as exc:
            raise ApiCallError(str(exc), kind="client_error") from None
        budget, frames = self._video_pixel_budget, request.frames
        if fields.get("video_transport") == "video" and budget and frames.num_frames * frames.height * frames.width > budget:
            fields["server_resizes"] = True  # the model sees smaller frames than the transformers backend would
            if request.video_path not in self._budget_warned:
                self._budget_warned.add(request.video_path)
                log.warning("%s: %d frames of %dx%d exceed the served processor's %d-pixel video budget: the server shrinks them "
                            "(lower --max_pixels or --max_frames to keep them as sampled)", request.video_path, frames.num_frames,
                            frames.width, frames.height, budget)
        return parts, fields, body

    # ------------------------------------------------------------------ generation

    def _signature(self, request: GenerationRequest) -> str:
        return json.dumps([request.key, request.seed, request.messages], sort_keys=True, ensure_ascii=False)

    def generate(self, batch: list[GenerationRequest]) -> list[GenerationOutput]:
        from k9bench.serving.openai_api import run_concurrent

        outcomes: dict[int, GenerationOutput | ApiCallError] = {}
        jobs: list[tuple[int, list[dict], dict, dict]] = []
        for pos, request in enumerate(batch):
            carried = self._carry.pop(request.key, None)
            if carried is not None and carried[0] == self._signature(request) and carried[1] is request.frames:
                outcomes[pos] = carried[2]
                continue
            try:
                media, fields, body = self._media_for(request)
            except ApiCallError as exc:
                outcomes[pos] = exc
                continue
            messages, params = self._api_messages(request.messages, media), self.request_params(request.seed, body)
            refused = self._over_size(request, messages, params, fields)
            if refused is not None:
                outcomes[pos] = refused
                continue
            jobs.append((pos, messages, params, fields))

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

    def _over_size(self, request: GenerationRequest, messages: list[dict], params: dict, fields: dict) -> ApiCallError | None:
        """The failure of a request over ``--max_request_mb`` (never sent), else None; its size goes into ``fields``."""
        size = request_bytes(self.settings.api_model, messages, {**params, "stream": True} if self.settings.stream else params)
        fields["request_bytes"] = size
        cap = self.settings.max_request_bytes
        if cap is None or size <= cap:
            return None
        with self._lock:
            self._usage["requests_over_size"] += 1
        return ApiCallError(f"the request is {size:,} bytes ({size / MIB:.2f} MiB), over --max_request_mb ({cap:,} bytes): not sent "
                            "(fewer frames, a smaller --frame_size, or a larger --max_request_mb if the provider takes more)",
                            kind=REQUEST_TOO_LARGE)

    def _call(self, request: GenerationRequest, messages: list[dict], params: dict, fields: dict) -> GenerationOutput | ApiCallError:
        """One chat call (with the client's retries); an :class:`ApiCallError` when it still fails."""
        s = self.settings
        with self._slots:
            result = self.client.chat(messages, model=s.api_model, label=f"idx {request.key}", stream=s.stream, **params)
        with self._lock:
            self._usage["retries"] += max(0, result.attempts - 1)
            if result.ok:
                self._usage["requests"] += 1
                self._usage["prompt_tokens"] += result.usage.prompt_tokens
                self._usage["completion_tokens"] += result.usage.completion_tokens
                self._usage["total_tokens"] += result.usage.total_tokens
                if result.model and result.model not in self._usage["served_models"]:
                    self._usage["served_models"].append(result.model)
                note_fingerprint(self.server, result.system_fingerprint)
            else:
                self._usage["failed_requests"] += 1
            self._unreachable_streak = self._unreachable_streak + 1 if (not result.ok and result.error_kind == "connection") else 0
            streak = self._unreachable_streak
        if streak >= self.unreachable_limit:
            raise BackendUnavailable(
                f"{streak} requests in a row could not connect to {s.base_url or 'the OpenAI API'} after their retries "
                f"(last: {result.error}); the server seems down, stopping instead of failing every remaining question"
            )
        if not result.ok and result.status_code == 400 and "trust-request-mm-kwargs" in (result.error or ""):
            raise BackendUnavailable(
                f"{s.base_url} refuses per-request media_io_kwargs (sent with --video_transport {s.video_transport}): "
                "start vLLM with --trust-request-mm-kwargs, or use --video_transport video (docs/vllm.md)")
        if not result.ok:
            status = f" (HTTP {result.status_code})" if result.status_code else ""
            kind = result.error_kind
            if kind == "client_error" and (result.status_code == 413 or is_size_refusal(result.error or "")):
                kind = REQUEST_TOO_LARGE  # the provider's own size limit
            return ApiCallError(f"{kind}{status} after {result.attempts} attempt(s): {result.error}",
                                kind=kind, status_code=result.status_code, attempts=result.attempts)
        if result.text is not None and not isinstance(result.text, str):
            return ApiCallError(f"the server's reply content is a {type(result.text).__name__}, not text", kind="bad_response",
                                attempts=result.attempts)
        if not (result.text or "").strip():
            return ApiCallError(f"the server returned an empty reply (finish_reason={result.finish_reason!r})",
                                kind="empty_reply", attempts=result.attempts)
        cap = getattr(self.client, "max_reply_chars", None)
        if cap is not None and (result.reply_chars or 0) > cap:
            log.warning("idx %s: the reply is %d characters, over the %d-character cap; its first %d are kept (api_reply_chars)",
                        request.key, result.reply_chars, cap, cap)
            fields["api_reply_chars"] = result.reply_chars
        usage = result.usage
        has_usage = usage.total_tokens > 0 or usage.prompt_tokens > 0
        extra = {
            **fields,
            "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                      "total_tokens": usage.total_tokens} if has_usage else None,
            "api_model": s.api_model,
            "api_served_model": result.model,
            "api_system_fingerprint": result.system_fingerprint,
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

    def server_info(self) -> dict[str, Any] | None:
        """What the server said about itself (``inference.backend.server``)."""
        return self.server

    def max_batches_in_flight(self) -> int:
        """Batches the runner may keep generating at once: ``--concurrency`` (HTTP calls wait, they do not compute)."""
        return self.settings.concurrency

    def close(self) -> None:
        if self.media is not None:
            self.media.clear()
        self._carry.clear()
        inner = getattr(self.client, "client", None)
        if inner is not None and hasattr(inner, "close"):
            try:
                inner.close()
            except Exception:  # closing is best effort
                pass
        self.client = None


def _env_name() -> str:
    from k9bench.serving.openai_api import API_KEY_ENV

    return API_KEY_ENV


__all__ = [
    "ApiCallError", "BatchPartlyFailed", "OpenAIBackend", "RequestSettings", "TRANSPORTS", "VIDEO_FPS_MAX_FRAMES",
    "encode_frames_jpeg", "frame_size_tuple", "parse_frame_size",
]
