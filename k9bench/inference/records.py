"""What an inference run writes: one record per question, the per-video records, and the raw file's
top-level keys (SPEC section 2 plus ours).

- :func:`make_record`: the record of one question (answer extraction, frames used, settings that shaped it);
- :class:`RunStats`: this invocation's counters (``run_stats``);
- :func:`video_records`: the videos the run used (scene, bytes, SHA-256 of the file, duration, frames
  sampled), built from the records so that resumed ones count too (issue 24: runs made on different video
  sets can be compared on common ground);
- :func:`inference_block` / :func:`final_meta`: the ``inference`` block and the other top-level keys.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from k9bench.answers import extract_answer, prompt_opens_thinking
from k9bench.artifacts import QuestionRecord, now_iso, provenance
from k9bench.headers.files import stamped

from k9bench.inference import registry
from k9bench.inference.backend import GenerationOutput
from k9bench.inference.resume_check import masked
from k9bench.inference.settings import RunConfig, inapplicable_flags

if TYPE_CHECKING:
    from k9bench.data.dataset import Question
    from k9bench.video.sampling import Frames

REQUEST_TOO_LARGE = "request_too_large"
"""``error_class`` of a question whose request is over ``--max_request_mb``, or that the provider refused as too large."""

OUTPUT_LIMIT = "output_limit"
"""``error_class`` of a reply with no text, cut at the output limit (a thinking model's thinking used it up)."""

ERROR_CLASSES = ("missing_video", "decode_error", "no_audio_stream", "audio_decode_error", "oom", "generation_error",
                 "question_too_long", REQUEST_TOO_LARGE, OUTPUT_LIMIT)
"""``error_class`` of a failed record."""

_SIZE_REFUSAL = re.compile(r"request payload size exceeds the limit|request entity too large|payload too large", re.IGNORECASE)


def is_size_refusal(text: str) -> bool:
    """True when a provider's error text refuses a request as too large (Gemini's "Request payload size exceeds the
    limit: 20971520 bytes.", an HTTP 413's "Request Entity Too Large")."""
    return bool(_SIZE_REFUSAL.search(text or ""))


class ClassedFailure(RuntimeError):
    """A backend's failure that is its own ``error_class`` (:data:`REQUEST_TOO_LARGE`, :data:`OUTPUT_LIMIT`...), not
    a plain ``generation_error``; the message is the record's ``error``."""

    def __init__(self, message: str, error_class: str) -> None:
        super().__init__(message)
        self.error_class = error_class


def error_class_of(exc: BaseException) -> str:
    """The ``error_class`` of a failed generation: the exception's own ``error_class``, else ``generation_error``."""
    return getattr(exc, "error_class", None) or "generation_error"

_MAX_ERROR_CHARS = 2000


@dataclass
class RunContext:
    """Everything fixed for the run that goes into each record."""

    model_name: str
    max_frames: int
    system_prompt: str
    use_system_message: bool
    seed: int
    generation: dict
    attn_implementation: str | None
    text_only: bool
    settings: dict = field(default_factory=dict)
    """Other settings that shape the answers (:func:`k9bench.inference.resume_check.fingerprint`'s ``run_settings``),
    kept in each record so that a resume cannot mix records made with different ones."""
    placement: str | None = None
    """Where the instructions stand (see :func:`k9bench.inference.planning.build_messages`); None: from ``use_system_message``."""

    @property
    def prompt_placement(self) -> str:
        return self.placement or ("system" if self.use_system_message else "empty_system")


def error_text(exc: BaseException) -> str:
    """``Type: message``, cut at 2,000 characters."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= _MAX_ERROR_CHARS else text[:_MAX_ERROR_CHARS] + "..."


def frame_fields(frames: "Frames | None") -> dict:
    """The record keys describing the frames used (all None in text-only mode or without frames)."""
    if frames is None:
        return {"frame_indices": None, "num_frames": 0, "sample_fps": None, "video_duration": None, "frame_size": None, "video_decoder": None}
    return {
        "frame_indices": list(frames.indices),
        "num_frames": frames.num_frames,
        "sample_fps": frames.sample_fps,
        "video_duration": frames.duration,
        "frame_size": [frames.height, frames.width],
        "video_decoder": frames.decoder,
    }


def make_record(
    question: "Question",
    ctx: RunContext,
    *,
    output: GenerationOutput | None = None,
    prompt: str = "",
    frames: "Frames | None" = None,
    error: BaseException | str | None = None,
    error_class: str | None = None,
    oom_retry: dict | None = None,
    audio: Any = None,
) -> QuestionRecord:
    """The raw record of one question (SPEC section 2 keys, then ours)."""
    from k9bench.prompts import sha256

    if output is not None:
        prompt = output.prompt
    extra: dict[str, Any] = {}
    if output is not None:
        extraction = extract_answer(output.text, thinking_opened=prompt_opens_thinking(output.prompt))
        response, answer = output.text, extraction.answer
        extra["answer_extraction"] = extraction.method
        extra["thinking_unfinished"] = extraction.thinking_unfinished
    else:
        response, answer = "", ""
    extra.update(frame_fields(frames))
    extra["text_only"] = ctx.text_only
    extra["audio_used"] = audio is not None
    extra["audio"] = audio.summary() if audio is not None else None
    extra["generation"] = dict(ctx.generation)
    extra["seed"] = ctx.seed
    extra["attn_implementation"] = ctx.attn_implementation
    extra["prompt_sha256"] = sha256(prompt) if prompt else None
    extra["run_settings"] = dict(ctx.settings)
    if output is not None:
        extra["num_input_tokens"] = output.num_input_tokens
        extra["num_output_tokens"] = output.num_output_tokens
        extra["finish_reason"] = output.finish_reason
        extra.update(output.extra)
    if oom_retry is not None:
        extra["oom_retry"] = oom_retry
    fields = question.record_fields()
    return QuestionRecord(
        idx=fields["idx"],
        question_category=fields["question_category"],
        video=fields["video"],
        ground_truth=fields["ground_truth"],
        response=response,
        answer=answer,
        scene_name=fields["scene_name"],
        question=fields["question"],
        options=fields["options"],
        prompt=prompt,
        model_name=ctx.model_name,
        max_frames=ctx.max_frames,
        timestamp=now_iso(),
        error=None if error is None else (error if isinstance(error, str) else error_text(error)),
        error_class=error_class,
        extra=extra,
    )


@dataclass
class RunStats:
    """Counters of this invocation (written under ``run_stats``)."""

    resumed: int = 0
    """Records taken from the checkpoint or an earlier final file."""
    generated: int = 0
    """Questions answered in this invocation."""
    failed: int = 0
    """Failed records produced in this invocation."""
    oom_retries: int = 0
    """Questions retried at half the frames after running out of memory."""
    batch_fallbacks: int = 0
    """Batches that failed and were rerun question by question."""
    generate_seconds: float = 0.0
    """Time inside the backend's generate, summed over batches (batches in flight together, as with
    ``--backend openai``, each count in full, so this can exceed ``wall_seconds``)."""
    frame_wait_seconds: float = 0.0
    """Time the loop waited for frames (decoding not hidden by prefetch)."""
    wall_seconds: float = 0.0
    """Wall time of the loop."""
    batch_size: dict | None = None
    """The batch size used and how it was chosen (:class:`k9bench.inference.batching.BatchSizeChoice`)."""
    prepare: dict | None = None
    """Batches prepared ahead of the model (:class:`k9bench.inference.pipeline.PipelineStats`): ``wait_seconds``
    is the model's time waiting for the CPU (frames, processor); None on the video-by-video path."""
    decoding: dict | None = None
    """The backend's own counters (:meth:`k9bench.inference.backend.Backend.run_stats`; vLLM's engine, a server's usage...)."""


def video_records(records: list[QuestionRecord]) -> list[dict]:
    """One entry per video a record used (first-seen order): ``scene_name``, ``video``, ``bytes`` and ``sha256``
    of the file (hashed once per run, when its frames were decoded), ``duration`` and ``frames_sampled``."""
    out: dict[str, dict] = {}
    for r in records:
        info = r.extra.get("video_file")
        if not isinstance(info, dict) or r.scene_name in out:
            continue
        retry = r.extra.get("oom_retry") if isinstance(r.extra.get("oom_retry"), dict) else {}
        sampled = retry.get("original_num_frames") or r.extra.get("num_frames")  # not the half of an out-of-memory retry
        out[r.scene_name] = {"scene_name": r.scene_name, "video": r.video, "bytes": info.get("bytes"), "sha256": info.get("sha256"),
                             "duration": r.extra.get("video_duration"), "frames_sampled": sampled}
    return list(out.values())


def reference_prompts(system_prompt: str) -> str:
    """:data:`k9bench.data.published.CONFIRMED_PROMPTS` when the system prompt hashes to the reference's
    (:func:`k9bench.data.published.reference_prompts_confirmed`), else ``unconfirmed``."""
    from k9bench.data.published import CONFIRMED_PROMPTS, reference_prompts_confirmed

    return CONFIRMED_PROMPTS if reference_prompts_confirmed(system_prompt=system_prompt) else "unconfirmed"


def inference_block(config: RunConfig, *, describe: dict | None, image_patch_size: int | None, prompt: tuple[str, str],
                    loaded: Any) -> dict:
    """The raw file's ``inference`` block: the run's settings as written (``dataclasses.asdict`` of each
    section of :class:`~k9bench.inference.settings.RunConfig`, documented by
    :func:`k9bench.inference.settings.settings_docs`), with what the run resolved beside them. Per-process
    values (shard, output path, worker count) are top-level keys instead, so that shards of one run share this block."""
    from k9bench.prompts import sha256

    asdict = dataclasses.asdict
    text_only = config.frames.text_only
    backend_settings = asdict(registry.backend_settings(config))
    dataset = {k: v for k, v in asdict(config.data).items() if k not in ("num_shards", "shard_id", "data_parallel")}
    return masked({
        "backend": describe,
        "text_only": text_only,
        "model": asdict(config.model),
        "backend_settings": backend_settings,
        **asdict(config.generation),
        "frames": None if text_only else {**asdict(config.frames), "image_patch_size": image_patch_size, "decoder": config.frames.video_decoder},
        "prompt": {
            **asdict(config.prompt),
            "placement": config.prompt.placement,
            "system_prompt_source": prompt[1],
            "system_prompt_sha256": sha256(prompt[0]),
            "reference_prompts": reference_prompts(prompt[0]),
        },
        "dataset": {**dataset, "source": loaded.source, "dropped_rows": len(loaded.dropped)},
        "adjusted_settings": dict(config.adjustments),
        "ignored_flags": inapplicable_flags(config),
    })


def failure_counts(records: list) -> dict[str, int]:
    """``error_class`` -> count over failed records (records as dicts or :class:`QuestionRecord`)."""
    out: dict[str, int] = {}
    for r in records:
        data = r if isinstance(r, dict) else r.to_dict()
        if data.get("error") is not None:
            key = data.get("error_class") or "error"
            out[key] = out.get(key, 0) + 1
    return out


def final_meta(config: RunConfig, argv: list[str] | None, *, records: list, model_name: str, describe: dict | None,
               image_patch_size: int | None, prompt: tuple[str, str], loaded: Any, stats: RunStats, started: str,
               frame_cache: Any, download_summary: dict | None) -> dict:
    """The raw file's top-level keys besides ``individual_results`` (docs/artifacts.md "raw JSON"), through the
    typed :class:`k9bench.headers.kinds.RawHeader` with its header block (stage ``inference``); the caller adds the
    ``stage`` block."""
    failures = failure_counts(records)
    return stamped("raw", "inference", {
        "total_count": len(records),
        "model_name": model_name,
        "model_name_or_path": config.model.model_name_or_path,
        "num_shards": config.data.num_shards,
        "shard_id": config.data.shard_id,
        "failed_count": sum(failures.values()),
        "failures_by_class": failures,
        # answers taken from a reply cut inside its <think> block (raise --max_new_tokens for these)
        "thinking_unfinished_count": sum(1 for r in records if r.extra.get("thinking_unfinished")),
        # over every record of the file, resumed ones included (the backend's own usage covers this invocation only)
        "token_totals": {
            "input": sum((r.extra.get("num_input_tokens") or 0) for r in records),
            "output": sum((r.extra.get("num_output_tokens") or 0) for r in records),
            "records_with_counts": sum(1 for r in records if r.extra.get("num_input_tokens") is not None),
        },
        "videos": video_records(records),
        "inference": inference_block(config, describe=describe, image_patch_size=image_patch_size, prompt=prompt,
                                     loaded=loaded),
        "run_stats": {
            "started_at": started,
            "finished_at": now_iso(),
            **stats.__dict__,
            "questions_per_second": (stats.generated + stats.failed) / stats.wall_seconds if stats.wall_seconds else None,
            "frame_cache": frame_cache.summary() if frame_cache is not None else None,
            "auto_download": download_summary,
        },
        "provenance": provenance("eval_video_llm.py", argv, config.flat()),
    })


__all__ = ["ERROR_CLASSES", "OUTPUT_LIMIT", "REQUEST_TOO_LARGE", "ClassedFailure", "error_class_of", "is_size_refusal", "RunContext", "RunStats", "error_text", "failure_counts", "final_meta",
           "frame_fields", "inference_block", "make_record", "reference_prompts", "video_records"]
