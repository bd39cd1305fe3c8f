"""The inference loop behind ``eval_video_llm.py``.

Questions are grouped by video (first-seen order) and, with ``--num_shards``, whole videos are
dealt to shards round-robin. ``--batch_size`` (default ``auto``) is resolved once by the backend
(:meth:`Runner._choose_batch_size`; ``auto`` is 1 on CPU and, on a GPU, the largest batch the free
memory holds, :func:`k9bench.inference.batching.auto_batch_size`) and recorded in ``run_stats.batch_size``.

Two paths:

- batch size 1, or a backend without ``prepare_batch`` (the OpenAI backend): video by video, each
  video's questions in batches of the batch size within that video (:meth:`Runner._run_by_video`);
  a background thread decodes the next videos' frames (:class:`FramePrefetcher`).
- batch size > 1 with the HF backend (:meth:`Runner._run_planned`): batches that span videos
  (:func:`k9bench.inference.batching.plan_batches`: questions stay grouped by video, a video is split
  only at a batch boundary), each prepared on the CPU ahead of the model by
  :class:`k9bench.inference.pipeline.AheadPipeline` (frames decoded on worker threads, the processor
  run) and answered by the backend's ``run_prepared`` (Qwen-VL: one shared-prefix prefill per video,
  :mod:`k9bench.inference.prefix_cache`; other models, or a batch the engine refuses: ``generate``,
  recorded with the reason). A video's frames are released after its last batch. The model's time
  waiting for the CPU is ``run_stats.prepare.wait_seconds``. A batch that runs out of memory halves
  the batch size (``run_stats.batch_size.history``) and is rerun video by video at the new size.

Each video is decoded once (:class:`k9bench.frame_cache.FrameCache`); with ``--audio`` its soundtrack
is read once too, at the rate the backend asks for (``FrameCache.get_audio``).

Every finished question, failed or not, is appended at once to ``<output>.partial.jsonl``
(:class:`k9bench.resume.ResumableStage`, fsynced). Rerunning the same command skips what is
there (failed records are retried unless ``--no_retry_failed``) and also reuses the records of an
existing final file, unless they were made with other settings
(:mod:`k9bench.inference.resume_check`). SIGTERM and SIGUSR1 stop the run at once (the checkpoint already holds
every finished question) with exit code :data:`EXIT_INTERRUPTED`; Ctrl-C gives
:data:`EXIT_SIGINT`. When every question has a record, the raw JSON (SPEC section 2 plus our
keys) is written atomically and the checkpoint removed.

A failure is a record with ``error`` and ``error_class`` (``missing_video``, ``decode_error``,
``no_audio_stream`` and ``audio_decode_error`` under ``--audio``, ``oom``, ``generation_error``) and never stops the run. A batch that fails is rerun question by
question; a question that runs out of accelerator memory is retried once with half the frames.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from k9bench.answers import extract_answer, prompt_opens_thinking
from k9bench.artifacts import QuestionRecord, RecordsArtifact, now_iso, provenance
from k9bench.layout import artifact_name, shard_path, short_model_name
from k9bench.progress import progress_enabled
from k9bench.resume import OutputLocationError, ResumableStage, ResumeRefused, check_output_folder, check_output_location
from k9bench.inference.backend import Backend, BackendError, BackendUnavailable, GenerationOutput, GenerationRequest, create_backend
from k9bench.inference.resume_check import expected_after_load, masked, expected_before_load, read_raw_records, record_fingerprint, run_settings
from k9bench.inference.settings import RunConfig
from k9bench.video import DEFAULT_IMAGE_PATCH_SIZE

if TYPE_CHECKING:
    from k9bench.dataset import Question
    from k9bench.video import Frames

log = logging.getLogger(__name__)

EXIT_OK = 0
"""Every selected question has a record (some may be failed records) and the raw JSON is written."""
EXIT_ERROR = 1
"""Unexpected error (a bug, or a failed write of the artifact); the checkpoint is kept."""
EXIT_USAGE = 2
"""Bad input: flags, dataset, prompt file, decoder, a checkpoint from another run."""
EXIT_BACKEND = 3
"""The model/backend could not be loaded."""
EXIT_INTERRUPTED = 75
"""Stopped by SIGTERM or SIGUSR1 (SLURM preemption/time limit); rerun the same command to resume."""
EXIT_SIGINT = 130
"""Stopped by Ctrl-C (SIGINT); rerun the same command to resume."""

ERROR_CLASSES = ("missing_video", "decode_error", "no_audio_stream", "audio_decode_error", "oom", "generation_error")
_MAX_ERROR_CHARS = 2000


class UsageError(ValueError):
    """Bad flags or input; the message says which."""


class Interrupted(BaseException):
    """Raised from the SIGTERM/SIGUSR1 handler to stop the run at once (not an ``Exception``)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


# --------------------------------------------------------------------------- planning


@dataclass
class VideoGroup:
    """The selected questions of one video."""

    scene_name: str
    """YouTube id."""
    video_url: str
    """URL of the video (for --auto_download)."""
    path: Path
    """``{video_dir}/{scene}.mp4``."""
    questions: list = field(default_factory=list)
    """The questions (k9bench.dataset.Question), in dataset order."""


def group_by_video(questions: list["Question"], video_dir: str | Path) -> list[VideoGroup]:
    """Questions grouped by video, groups in order of first appearance."""
    groups: dict[str, VideoGroup] = {}
    for q in questions:
        group = groups.get(q.scene_name)
        if group is None:
            group = groups[q.scene_name] = VideoGroup(q.scene_name, q.video_url, Path(video_dir) / q.video)
        group.questions.append(q)
    return list(groups.values())


def shard_groups(groups: list[VideoGroup], num_shards: int, shard_id: int) -> list[VideoGroup]:
    """Videos dealt round-robin (in first-appearance order): shard ``k`` gets groups k, k+N, k+2N..."""
    if num_shards < 1 or not 0 <= shard_id < num_shards:
        raise UsageError(f"--shard_id {shard_id} must be in [0, --num_shards {num_shards})")
    return groups[shard_id::num_shards]


def chunks(items: list, size: int) -> Iterator[list]:
    """Consecutive slices of at most ``size`` items."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


def default_output_file(model: str, max_frames: int, max_samples: int, audio: bool = False) -> str:
    """The launcher's file name: ``raw_<model>_mf<frames>_n<samples>.json``, ``..._av.json`` with ``--audio``
    (:func:`k9bench.layout.artifact_name`)."""
    return artifact_name("raw", model, max_frames, max_samples, audio=audio)


def shard_output_file(output: str | Path, num_shards: int, shard_id: int) -> Path:
    """``x.json`` -> ``x.shard{i}of{n}.json`` for a sharded run (:func:`k9bench.layout.shard_path`)."""
    return shard_path(output, num_shards, shard_id)


PLACEMENTS = ("system", "empty_system", "user_turn")
"""Where the instructions stand (:attr:`k9bench.inference.settings.PromptSettings.placement`)."""


def build_messages(question: str, system_prompt: str, placement: str, with_video: bool) -> list[dict]:
    """The chat for one question: a system turn, then a user turn with the video and the question.

    ``placement`` ``system``: the instructions are the system turn (the default); ``empty_system``:
    an empty system turn, no instructions at all (the reference's ``--use_system_message False``);
    ``user_turn``: no system turn, the instructions open the user turn (``--instructions_in_user_turn``,
    for templates without a system role). The options are never shown (SPEC section 3).
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement {placement!r}: one of {', '.join(PLACEMENTS)}")
    user: list[dict] = []
    if with_video:
        user.append({"type": "video"})
    text = f"{system_prompt}\n\n{question}" if placement == "user_turn" else question
    user.append({"type": "text", "text": text})
    messages: list[dict] = []
    if placement != "user_turn":
        messages.append({"role": "system", "content": [{"type": "text", "text": system_prompt if placement == "system" else ""}]})
    messages.append({"role": "user", "content": user})
    return messages


# --------------------------------------------------------------------------- frames


class FramePrefetcher:
    """Decodes upcoming videos' frames in one background thread.

    Every call into the frame cache (``get`` and ``release``) runs on that one worker thread,
    in submission order, so the cache is never used concurrently.
    """

    def __init__(self, cache: Any):
        self.cache = cache
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="k9bench-frames")
        self._futures: dict[str, Future] = {}
        self.wait_seconds = 0.0
        """Time the main thread spent waiting for frames."""

    def schedule(self, path: Path) -> None:
        key = str(path)
        if key not in self._futures:
            self._futures[key] = self._pool.submit(self.cache.get, path)

    def get(self, path: Path) -> "Frames":
        """The video's frames (raises ``VideoError``), waiting for the worker if needed."""
        self.schedule(path)
        t0 = time.perf_counter()
        try:
            return self._futures[str(path)].result()
        finally:
            self.wait_seconds += time.perf_counter() - t0

    def release(self, path: Path) -> None:
        self._futures.pop(str(path), None)
        self._pool.submit(self.cache.release, path)

    def close(self) -> None:
        for fut in self._futures.values():
            fut.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)


# --------------------------------------------------------------------------- records


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
    """Other settings that shape the answers (:func:`k9bench.inference.resume_check.run_settings`), kept
    in each record as ``run_settings`` so that a resume cannot mix records made with different ones."""
    placement: str | None = None
    """Where the instructions stand (see :func:`build_messages`); None: from ``use_system_message``."""

    @property
    def prompt_placement(self) -> str:
        return self.placement or ("system" if self.use_system_message else "empty_system")


def _resume_refused(mismatch: str) -> int:
    log.error("%s; rerun with the flags that produced it (its records keep generation, seed, attn_implementation "
              "and run_settings), or use another --output_file", mismatch)
    return EXIT_USAGE


def _error_text(exc: BaseException) -> str:
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
        error=None if error is None else (error if isinstance(error, str) else _error_text(error)),
        error_class=error_class,
        extra=extra,
    )


# --------------------------------------------------------------------------- the run


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
    """The backend's own counters (shared-prefix engine: prefills, prefix reuses...; fallbacks to generate)."""


class Runner:
    """One invocation of the inference loop (see the module doc)."""

    def __init__(self, config: RunConfig, backend: Backend, ctx: RunContext, sampling: Any):
        self.config = config
        self.backend = backend
        self.ctx = ctx
        self.sampling = sampling
        self.stats = RunStats()
        self.checkpoint: ResumableStage | None = None
        self.bar = None
        self._half_cache: dict = {}
        self._emit_lock = threading.RLock()
        self._stopped = False

    # -- one batch -------------------------------------------------------

    def _requests(self, questions: list, frames: "Frames | None", path: Path | None = None, audio: Any = None) -> list[GenerationRequest]:
        return [
            GenerationRequest(
                key=q.idx,
                messages=build_messages(q.question, self.ctx.system_prompt, self.ctx.prompt_placement, frames is not None),
                frames=frames,
                seed=self.ctx.seed,
                video_path=str(path) if frames is not None and path is not None else None,
                audio=audio,
            )
            for q in questions
        ]

    def _prompt_for(self, question: "Question", with_video: bool) -> str:
        try:
            return self.backend.render_prompt(build_messages(question.question, self.ctx.system_prompt, self.ctx.prompt_placement, with_video))
        except Exception:  # a failed record still gets written without its prompt
            return ""

    def _generate(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        t0 = time.perf_counter()
        try:
            outputs = self.backend.generate(requests)
        finally:
            with self._emit_lock:  # batches may run on worker threads (see _BatchPipeline)
                self.stats.generate_seconds += time.perf_counter() - t0
        if len(outputs) != len(requests):
            raise RuntimeError(f"backend returned {len(outputs)} outputs for {len(requests)} requests")
        return outputs

    def _half_frames(self, group: VideoGroup, frames: "Frames") -> "Frames":
        from dataclasses import replace

        from k9bench.video import sample

        key = (str(group.path), frames.num_frames)
        cached = self._half_cache.get(key)
        if cached is None:
            settings = replace(self.sampling, max_frames=max(2, frames.num_frames // 2))
            cached = sample(group.path, **settings.sample_kwargs())
            self._half_cache = {key: cached}  # the other questions of this video reuse it
        return cached

    def _run_one(self, group: VideoGroup, question: "Question", frames: "Frames | None", audio: Any = None) -> QuestionRecord:
        try:
            out = self._generate(self._requests([question], frames, group.path, audio))[0]
            return make_record(question, self.ctx, output=out, frames=frames, audio=audio)
        except BackendUnavailable:
            raise
        except Exception as exc:
            if not self.backend.is_out_of_memory(exc):
                log.warning("idx %s: generation failed: %s", question.idx, _error_text(exc))
                return make_record(question, self.ctx, prompt=self._prompt_for(question, frames is not None), frames=frames, error=exc, error_class="generation_error", audio=audio)
            first_error = _error_text(exc)
        # out of memory: free what we can and retry once at half the frames
        self.backend.recover_from_out_of_memory()
        with self._emit_lock:  # batches may run on worker threads (see _BatchPipeline)
            self.stats.oom_retries += 1
        if frames is None:
            log.warning("idx %s: out of memory in text-only mode; not retried", question.idx)
            return make_record(question, self.ctx, prompt=self._prompt_for(question, False), error=first_error, error_class="oom", oom_retry={"first_error": first_error, "retried": False})
        try:
            fewer = self._half_frames(group, frames)
        except Exception as exc:  # VideoError, or anything else while re-sampling
            return make_record(question, self.ctx, prompt=self._prompt_for(question, True), frames=frames, error=first_error, error_class="oom",
                               oom_retry={"first_error": first_error, "retried": False, "resample_error": _error_text(exc)}, audio=audio)
        info = {"first_error": first_error, "retried": True, "original_num_frames": frames.num_frames, "retry_num_frames": fewer.num_frames}
        log.warning("idx %s: out of memory with %d frames; retrying once with %d", question.idx, frames.num_frames, fewer.num_frames)
        try:
            out = self._generate(self._requests([question], fewer, group.path, audio))[0]
            return make_record(question, self.ctx, output=out, frames=fewer, oom_retry=info, audio=audio)
        except BackendUnavailable:
            raise
        except Exception as exc:
            error_text = _error_text(exc)
            error_class = "oom" if self.backend.is_out_of_memory(exc) else "generation_error"
        if error_class == "oom":
            self.backend.recover_from_out_of_memory()  # out of the except block, as above
        log.warning("idx %s: failed again with %d frames: %s", question.idx, fewer.num_frames, error_text)
        return make_record(question, self.ctx, prompt=self._prompt_for(question, True), frames=fewer, error=error_text, error_class=error_class, oom_retry=info, audio=audio)

    def _run_batch(self, group: VideoGroup, questions: list, frames: "Frames | None", audio: Any = None) -> None:
        if len(questions) == 1:
            self._emit(self._run_one(group, questions[0], frames, audio))
            return
        failure = None
        try:
            outputs = self._generate(self._requests(questions, frames, group.path, audio))
        except BackendUnavailable:
            raise
        except Exception as exc:
            failure = (_error_text(exc), self.backend.is_out_of_memory(exc))
        if failure is not None:
            # Out of the except block: the failed batch's traceback (and the tensors its frames hold)
            # is gone before the cache is emptied and the questions are rerun one by one.
            error_text, out_of_memory = failure
            if out_of_memory:
                self.backend.recover_from_out_of_memory()
            with self._emit_lock:
                self.stats.batch_fallbacks += 1
            log.warning("video %s: batch of %d failed (%s); running its questions one by one", group.scene_name, len(questions), error_text)
            for q in questions:
                self._emit(self._run_one(group, q, frames, audio))
            return
        for q, out in zip(questions, outputs):
            self._emit(make_record(q, self.ctx, output=out, frames=frames, audio=audio))

    def _emit(self, record: QuestionRecord) -> None:
        with self._emit_lock:  # batches may finish on worker threads (see _BatchPipeline)
            if self._stopped:
                return  # the run was interrupted: the checkpoint is closed, this answer is dropped
            self._emit_locked(record)

    def _emit_locked(self, record: QuestionRecord) -> None:
        self.checkpoint.append(record.to_dict())
        self.done[record.idx] = record.to_dict()
        if record.failed:
            self.stats.failed += 1
        else:
            self.stats.generated += 1
        if self.bar is not None:
            self.bar.update(1)
            if record.failed:
                self.bar.set_postfix(failed=self.stats.failed, refresh=False)

    # -- the loop --------------------------------------------------------

    def _video_failed(self, questions: list, exc: BaseException) -> None:
        """Failed records for questions whose video (or soundtrack) cannot be read."""
        for q in questions:
            self._emit(make_record(q, self.ctx, prompt=self._prompt_for(q, True), error=str(exc),
                                   error_class=getattr(exc, "reason_class", None) or "decode_error"))

    def _audio_rate(self) -> int | None:
        if not self.config.frames.audio or self.config.frames.text_only:
            return None
        rate = getattr(self.backend, "audio_sampling_rate", lambda: None)()
        if rate is None:
            raise BackendError(f"--audio: backend {self.backend.name!r} says at which rate it takes a soundtrack")
        return int(rate)

    def run(self, groups: list[VideoGroup], done: dict, checkpoint: ResumableStage, frame_cache: Any) -> None:
        from tqdm.auto import tqdm

        self.done = done
        self.checkpoint = checkpoint
        pending = [(g, [q for q in g.questions if q.idx not in done]) for g in groups]
        pending = [(g, qs) for g, qs in pending if qs]
        total = sum(len(qs) for _, qs in pending)
        log.info("%d question(s) to run over %d video(s); %d already done", total, len(pending), self.stats.resumed)
        self.choice = self._choose_batch_size(total)
        self.stats.batch_size = self.choice.to_dict()
        t0 = time.perf_counter()
        self.bar = tqdm(total=total, unit="q", desc="inference", disable=progress_enabled(), dynamic_ncols=True)
        planned = self.choice.batch_size > 1 and callable(getattr(self.backend, "prepare_batch", None))
        try:
            if planned:
                self._run_planned(pending, frame_cache)
            else:
                self._run_by_video(pending, frame_cache)
        except BaseException:
            with self._emit_lock:
                self._stopped = True  # batches still running on worker threads record nothing more
            raise
        finally:
            self.bar.close()
            self.bar = None
            self.stats.wall_seconds = time.perf_counter() - t0
            self.stats.batch_size = self.choice.to_dict()
            backend_stats = getattr(self.backend, "run_stats", None)
            if callable(backend_stats):
                self.stats.decoding = backend_stats()

    def _choose_batch_size(self, questions: int) -> Any:
        """``--batch_size`` resolved by the backend (``auto``: its memory rule), else as given (``auto``: 1)."""
        from k9bench.inference.batching import AUTO, BatchSizeChoice, given_batch_size

        requested = self.config.generation.batch_size
        choose = getattr(self.backend, "choose_batch_size", None)
        if callable(choose):
            f = self.config.frames
            choice = choose(requested, questions=questions, max_frames=f.max_frames, max_pixels=f.max_pixels)
        elif requested == AUTO:
            choice = BatchSizeChoice(AUTO, 1, f"backend {self.backend.name}: auto means 1 question per batch", {}, [[1, "chosen"]])
        else:
            choice = given_batch_size(int(requested))
        log.info("batch size %d (%s: %s)", choice.batch_size, choice.requested, choice.reason)
        return choice

    def _run_by_video(self, pending: list, frame_cache: Any) -> None:
        """Today's loop: one video at a time, its questions in batches of the batch size (within the video)."""
        from k9bench.audio import AudioError
        from k9bench.video import VideoError

        prefetch = FramePrefetcher(frame_cache) if frame_cache is not None else None
        depth = max(0, self.config.frames.prefetch_videos)
        rate = self._audio_rate()
        in_flight = int(getattr(self.backend, "max_batches_in_flight", lambda: 1)() or 1)
        pipeline = _BatchPipeline(self, prefetch, in_flight) if in_flight > 1 else None
        size = self.choice.batch_size
        try:
            for i, (group, questions) in enumerate(pending):
                frames = audio = None
                if prefetch is not None:
                    for ahead, _ in pending[i:i + 1 + depth]:
                        prefetch.schedule(ahead.path)
                        if rate is not None:
                            frame_cache.prefetch(ahead.path, audio_sampling_rate=rate)
                    try:
                        frames = prefetch.get(group.path)
                        if rate is not None:
                            audio = frame_cache.get_audio(group.path, rate)
                    except (VideoError, AudioError) as exc:
                        self._video_failed(questions, exc)
                        prefetch.release(group.path)
                        continue
                if pipeline is not None:
                    pipeline.submit(group, chunks(questions, size), frames, audio)
                    continue
                for batch in chunks(questions, size):
                    self._run_batch(group, batch, frames, audio)
                if prefetch is not None:
                    prefetch.release(group.path)
            if pipeline is not None:
                pipeline.finish()
        finally:
            if prefetch is not None:
                self.stats.frame_wait_seconds = prefetch.wait_seconds
                prefetch.close()

    def _run_planned(self, pending: list, frame_cache: Any) -> None:
        """Batches spanning videos (:func:`k9bench.inference.batching.plan_batches`), each prepared on the CPU
        ahead of the model by :class:`k9bench.inference.pipeline.AheadPipeline` (frames decoded, processor run),
        answered by the backend's ``run_prepared``; a video's frames are released after its last batch."""
        import os

        from k9bench.audio import AudioError
        from k9bench.inference.batching import BatchPart, PlannedBatch, plan_batches
        from k9bench.inference.pipeline import AheadPipeline
        from k9bench.video import VideoError

        rate = self._audio_rate()
        cursor = [0] * len(pending)
        choice = self.choice

        def batches() -> Iterator[PlannedBatch]:
            # planned with the batch size in use; planned again for what is left after an out-of-memory halving
            while True:
                size = choice.batch_size
                base = list(cursor)
                remaining = [len(qs) - base[g] for g, (_, qs) in enumerate(pending)]
                if not any(remaining):
                    return
                for planned in plan_batches(remaining, size):
                    parts = tuple(BatchPart(p.group, p.start + base[p.group], p.stop + base[p.group]) for p in planned.parts)
                    for p in parts:
                        cursor[p.group] = p.stop
                    yield PlannedBatch(parts, planned.release)
                    if choice.batch_size != size:
                        break

        workers = max(2, min(PREPARE_WORKERS_MAX, (os.cpu_count() or 2) // 2))
        depth = max(2, self.config.frames.prefetch_videos)
        decode_pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="k9bench-decode") if frame_cache is not None else None

        def media(path: Path) -> tuple:
            frames = frame_cache.get(path)
            return frames, (frame_cache.get_audio(path, rate) if rate is not None else None)

        def prepare(batch: PlannedBatch) -> _ReadyBatch:
            ready = _ReadyBatch(batch)
            loading = {p.group: decode_pool.submit(media, pending[p.group][0].path) for p in batch.parts} if decode_pool else {}
            for part in batch.parts:
                group, questions = pending[part.group]
                frames = audio = None
                if part.group in loading:
                    try:
                        frames, audio = loading[part.group].result()
                    except (VideoError, AudioError) as exc:
                        ready.failed.append((questions[part.start:part.stop], exc))
                        continue
                for q in questions[part.start:part.stop]:
                    ready.rows.append((group, q, frames, audio))
            if ready.rows:
                ready.requests = [self._requests([q], frames, group.path, audio)[0] for group, q, frames, audio in ready.rows]
                try:
                    ready.prepared = self.backend.prepare_batch(ready.requests)
                except Exception as exc:  # the batch is rerun by video on the generate path, which records failures
                    ready.prepare_error = exc
            return ready

        ahead = AheadPipeline(prepare, workers=workers, depth=depth)
        try:
            for item in ahead.run(batches()):
                if item.error is not None:
                    raise item.error
                ready = item.value
                for questions, exc in ready.failed:
                    self._video_failed(questions, exc)
                if ready.rows:
                    self._answer_ready(ready)
                if frame_cache is not None:
                    for g in item.item.release:
                        frame_cache.release(pending[g][0].path)
        finally:
            ahead.close()
            if decode_pool is not None:
                decode_pool.shutdown(wait=False, cancel_futures=True)
            self.stats.frame_wait_seconds = ahead.stats.wait_seconds
            self.stats.prepare = {**ahead.stats.to_dict(), "decode_workers": workers if decode_pool else 0}

    def _answer_ready(self, ready: "_ReadyBatch") -> None:
        failure = None
        if ready.prepare_error is not None:
            failure = (_error_text(ready.prepare_error), False)
        else:
            t0 = time.perf_counter()
            try:
                outputs = self.backend.run_prepared(ready.prepared)
                if len(outputs) != len(ready.rows):
                    raise RuntimeError(f"backend returned {len(outputs)} outputs for {len(ready.rows)} requests")
            except BackendUnavailable:
                raise
            except Exception as exc:
                failure = (_error_text(exc), self.backend.is_out_of_memory(exc))
            finally:
                self.stats.generate_seconds += time.perf_counter() - t0
        if failure is None:
            for (group, q, frames, audio), out in zip(ready.rows, outputs):
                self._emit(make_record(q, self.ctx, output=out, frames=frames, audio=audio))
            return
        # out of the except block (the failed batch's tensors are gone): rerun by video on the generate path
        error_text, out_of_memory = failure
        size = 1
        if out_of_memory:
            self.backend.recover_from_out_of_memory()
            size = self.choice.halve()
            log.warning("batch of %d questions ran out of memory; batch size now %d", len(ready.rows), size)
        self.stats.batch_fallbacks += 1
        log.warning("batch of %d question(s) failed (%s); rerunning it by video at batch size %d", len(ready.rows), error_text, size)
        by_video: dict[str, tuple] = {}
        for group, q, frames, audio in ready.rows:
            by_video.setdefault(str(group.path), (group, frames, audio, []))[3].append(q)
        for group, frames, audio, questions in by_video.values():
            for chunk in chunks(questions, size):
                self._run_batch(group, chunk, frames, audio)


PREPARE_WORKERS_MAX = 8
"""Most threads decoding videos and preparing batches ahead of the model (half the CPU cores, at least 2, at most this)."""


@dataclass
class _ReadyBatch:
    """A planned batch after its CPU preparation."""

    planned: Any
    rows: list = field(default_factory=list)
    """``(group, question, frames, audio)`` per question, in batch order."""
    failed: list = field(default_factory=list)
    """``(questions, exception)`` for videos whose frames or soundtrack cannot be read."""
    requests: list = field(default_factory=list)
    prepared: Any = None
    prepare_error: BaseException | None = None


class _BatchPipeline:
    """Keeps up to ``in_flight`` batches generating at once, for backends whose ``generate`` mostly
    waits (an HTTP server: see ``max_batches_in_flight``).

    Batches are started in the loop's order (video by video, so the questions of a video are
    sent next to each other), each on its own daemon thread (an interrupted run does not wait
    for them); records are emitted as batches finish. A video's frames are released when its
    last batch is done. An error raised by a batch (not a failed question, which is a record)
    stops the run from the main thread.
    """

    def __init__(self, runner: "Runner", prefetch: "FramePrefetcher | None", in_flight: int):
        import queue

        self.runner = runner
        self.prefetch = prefetch
        self.slots = threading.BoundedSemaphore(in_flight)
        self.finished: "queue.Queue[tuple[VideoGroup, BaseException | None]]" = queue.Queue()
        self.remaining: dict[str, int] = {}

    def _work(self, group: VideoGroup, batch: list, frames: "Frames | None", audio: Any = None) -> None:
        error: BaseException | None = None
        try:
            self.runner._run_batch(group, batch, frames, audio)
        except BaseException as exc:  # handed to the main thread
            error = exc
        finally:
            self.slots.release()
            self.finished.put((group, error))

    def _collect(self, block: bool) -> None:
        import queue

        while self.remaining:
            try:
                group, error = self.finished.get(timeout=0.1) if block else self.finished.get_nowait()
            except queue.Empty:
                if block:
                    continue
                return
            if error is not None:
                raise error
            key = str(group.path)
            self.remaining[key] -= 1
            if self.remaining[key] == 0:
                del self.remaining[key]
                if self.prefetch is not None:
                    self.prefetch.release(group.path)
            block = False  # one finished batch is enough; take the others that are ready

    def submit(self, group: VideoGroup, batches, frames: "Frames | None", audio: Any = None) -> None:
        """Start every batch of one video (waiting for free slots; signals stay deliverable)."""
        batches = list(batches)
        self.remaining[str(group.path)] = self.remaining.get(str(group.path), 0) + len(batches)
        for batch in batches:
            while not self.slots.acquire(timeout=0.1):
                self._collect(block=False)
            threading.Thread(target=self._work, args=(group, batch, frames, audio), name="k9bench-batch", daemon=True).start()
            self._collect(block=False)

    def finish(self) -> None:
        """Wait for every started batch."""
        while self.remaining:
            self._collect(block=True)


# --------------------------------------------------------------------------- entry point


def _install_signal_handlers() -> dict:
    previous = {}
    if threading.current_thread() is not threading.main_thread():
        return previous

    stopping = []

    def _handler(signum, frame):
        # Raise once. SLURM's scancel/requeue signals every process of the job and the launcher
        # forwards the signal too: a second one must not interrupt the clean-up of the first.
        if stopping:
            return
        stopping.append(signum)
        raise Interrupted(signum)

    for name in ("SIGTERM", "SIGUSR1"):
        sig = getattr(signal, name, None)
        if sig is not None:
            previous[sig] = signal.signal(sig, _handler)
    return previous


def _restore_signal_handlers(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def looks_like_local_path(name: str) -> bool:
    """True for a model given as a path rather than a Hub id (``./m``, ``/abs/m``, ``~/m``, ``a/b/c``)."""
    text = str(name)
    return text.startswith((".", "/", "~")) or text.count("/") > 1 or text.endswith("/") or "\\" in text


def preflight(config: RunConfig) -> None:
    """Raise :class:`UsageError` for flag values that cannot work together (the flags' own ranges are
    checked by their argparse types). Runs before any file is read or model loaded."""
    f, g, d = config.frames, config.generation, config.data
    checks = [
        (f.max_frames == 0 or f.max_frames >= 2,
         f"--max_frames must be 0 (text only) or at least 2 (qwen-vl-utils rounds frame counts to even numbers) (got {f.max_frames})"),
        (d.shard_id < d.num_shards, f"--shard_id must be in [0, {d.num_shards}) (got {d.shard_id})"),
        (d.max_samples == -1 or d.max_samples >= 1, f"--max_samples must be -1 (all) or at least 1 (got {d.max_samples})"),
        (d.end_idx is None or d.end_idx > d.start_idx, f"--end_idx {d.end_idx} must be above --start_idx {d.start_idx}"),
        (not (g.do_sample is True and g.temperature == 0), "--do_sample with --temperature 0 cannot sample; use --greedy"),
        (g.top_p is None or g.top_p > 0, f"--top_p must be in (0, 1] (got {g.top_p})"),
        (not (config.prompt.instructions_in_user_turn and config.prompt.use_system_message),
         "--instructions_in_user_turn goes with --use_system_message False (the instructions are then not the system turn)"),
        (not (f.audio and f.text_only), "--audio needs the videos: it cannot go with --max_frames 0 (text only)"),
        (not (f.audio and config.model.backend == "openai" and config.openai.video_transport == "video_url"),
         "--audio sends the soundtrack as an input_audio part beside the frames: use --video_transport frames"),
    ]
    for ok, message in checks:
        if not ok:
            raise UsageError(message)


def check_model_path(config: RunConfig) -> str | None:
    """Why the model cannot be loaded, known without loading it (a local path that does not exist), or None.
    (A Hub id that is not cached while the Hub is out of reach is refused by the HF backend before it loads
    anything: :meth:`k9bench.inference.hf.HFBackend.check_source`.)"""
    name = config.model.model_name_or_path
    if config.model.backend == "hf" and looks_like_local_path(name):
        path = Path(name).expanduser()
        if not path.exists():
            return f"--model_name_or_path {name}: no such folder (a local model path; a Hub id looks like org/name)"
        if not path.is_dir():
            return f"--model_name_or_path {name}: not a folder (a local model is a folder with config.json and the weights)"
    return None


def output_path(config: RunConfig) -> Path:
    """The raw file this process writes: ``--output_file`` or the launcher's name, plus the shard suffix."""
    d = config.data
    output = config.output.output_file or default_output_file(config.model.model_name_or_path, config.frames.max_frames, d.max_samples,
                                                              audio=config.frames.audio)
    return shard_output_file(output, d.num_shards, d.shard_id)


def auto_download(groups: list[VideoGroup], video_dir: str, *, cookies: str | None = None,
                  cookies_from_browser: str | None = None, workers: int | None = None) -> dict:
    """Fetch the missing videos of ``groups`` with :func:`k9bench.download.download_videos`; return a summary."""
    from k9bench.download import DownloadConfig, download_videos

    missing = {g.scene_name: g.video_url for g in groups if not g.path.exists()}
    if not missing:
        log.info("--auto_download: every video is already in %s", video_dir)
        return {"requested": 0}
    log.info("--auto_download: fetching %d missing video(s) into %s", len(missing), video_dir)
    from k9bench.settings import default_of

    config = DownloadConfig(progress=progress_enabled() is not True, cookies=cookies, cookies_from_browser=cookies_from_browser,
                            workers=default_of(DownloadConfig, "workers") if workers is None else workers)
    report = download_videos(missing, video_dir, config)
    log.info("--auto_download: %s", report.summary_line())
    failed = {r.scene_name: f"{r.error_class}: {r.message}" for r in report.failed}
    for scene, why in failed.items():
        log.warning("--auto_download: %s failed (%s); its questions will be recorded as missing_video", scene, why)
    return {"requested": len(missing), "counts": report.counts, "failed": failed}


def inference_block(config: RunConfig, *, describe: dict | None, image_patch_size: int | None, prompt: tuple[str, str],
                    loaded: Any) -> dict:
    """The raw file's ``inference`` block: the run's settings as written (``dataclasses.asdict`` of each
    section of :class:`~k9bench.inference.settings.RunConfig`, documented by
    :func:`k9bench.inference.settings.settings_docs`), with what the run resolved beside them. Per-process
    values (shard, output path) are top-level keys instead, so that shards of one run share this block."""
    from k9bench.prompts import sha256

    asdict = dataclasses.asdict
    text_only = config.frames.text_only
    backend_settings = asdict(config.hf) if config.model.backend == "hf" else asdict(config.openai)
    dataset = {k: v for k, v in asdict(config.data).items() if k not in ("num_shards", "shard_id")}
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
        },
        "dataset": {**dataset, "source": loaded.source, "dropped_rows": len(loaded.dropped)},
        "adjusted_settings": dict(config.adjustments),
    })


def final_meta(config: RunConfig, argv: list[str] | None, *, records: list, failures: dict, model_name: str, describe: dict | None,
               image_patch_size: int | None, prompt: tuple[str, str], loaded: Any, stats: RunStats, started: str,
               frame_cache: Any, download_summary: dict | None) -> dict:
    """The raw file's top-level keys besides ``individual_results`` (see the README section)."""
    return {
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
    }


def run(config: RunConfig, argv: list[str] | None) -> int:
    """Run the whole inference (called by ``eval_video_llm.main`` with the resolved config, see
    :func:`k9bench.inference.settings.resolve`); returns the exit code."""
    from k9bench.dataset import DatasetError, load_questions, select_range
    from k9bench.download import DownloadInputError
    from k9bench.prompts import load_prompt, sha256

    started = now_iso()
    data, frames = config.data, config.frames
    text_only = frames.text_only
    try:
        preflight(config)
        output = check_output_location(output_path(config), inputs=[data.dataset_name])
        if frames.frame_cache_dir and not text_only:
            check_output_folder(frames.frame_cache_dir, flag="--frame_cache_dir")
    except (UsageError, OutputLocationError) as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    why = check_model_path(config)
    if why:
        log.error("%s", why)
        return EXIT_BACKEND
    try:
        system_prompt, prompt_source = load_prompt("system_prompt", config.prompt.system_prompt_file)
        loaded = load_questions(data.dataset_name, data.split, drop_invalid=data.drop_invalid_rows)
    except (UsageError, DatasetError, FileNotFoundError) as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    selection = select_range(loaded.questions, data.start_idx, data.end_idx, data.max_samples)
    if not selection:
        log.error("no question selected (--start_idx %s, --end_idx %s, --max_samples %s out of %d)", data.start_idx, data.end_idx,
                  data.max_samples, len(loaded.questions))
        return EXIT_USAGE
    groups = shard_groups(group_by_video(selection, data.video_dir), data.num_shards, data.shard_id)
    selected = {q.idx: q for g in groups for q in g.questions}
    if data.num_shards > 1:
        log.info("shard %d of %d: %d video(s), %d question(s)", data.shard_id, data.num_shards, len(groups), len(selected))
    if len(selected) < sum(len(g.questions) for g in groups):
        log.error("the selection holds duplicate idx values; each question needs a unique idx")
        return EXIT_USAGE

    stage = ResumableStage(output, read_final=read_raw_records)
    model_name = short_model_name(config.model.model_name_or_path)
    prompt_sha = sha256(system_prompt)

    # Cheap checks of resumable state, and the settings known before the model loads, come first.
    try:
        done = stage.load(selected=selected, retry_failed=not config.output.no_retry_failed)
        stage.check(done, expected_before_load(config, model_name, prompt_sha), fingerprint_of=record_fingerprint)
    except ResumeRefused as exc:
        return _resume_refused(str(exc))
    pending_groups = [g for g in groups if any(q.idx not in done for q in g.questions)]

    download_summary = None
    if data.auto_download and not text_only and pending_groups:
        try:
            download_summary = auto_download(pending_groups, data.video_dir, cookies=data.download_cookies,
                                             cookies_from_browser=data.download_cookies_from_browser, workers=data.download_workers)
        except DownloadInputError as exc:
            log.error("--auto_download: %s", exc)
            return EXIT_USAGE

    if not text_only and pending_groups and not Path(data.video_dir).is_dir():
        # not one failed "missing_video" record per question for a mistyped folder
        log.error("--video_dir %s is not a folder; fetch the videos first (download_videos.py --output_dir %s) or pass --auto_download",
                  data.video_dir, data.video_dir)
        return EXIT_USAGE

    if not pending_groups and output.exists() and not stage.checkpoint.exists():
        log.info("%s already holds a record for every selected question; nothing to do", output)
        return _all_failed_exit(list(done.values()), output)

    backend = None
    frame_cache = None
    sampling = None
    describe = None
    patch = None
    runner_obj: Runner | None = None
    previous_handlers = _install_signal_handlers()
    try:
        try:
            backend = create_backend(config)
            backend.load()
        except BackendError as exc:
            log.error("%s", exc)
            return EXIT_BACKEND
        describe = backend.describe()  # live (usage counters); masked when written
        patch = None if text_only else (backend.frame_patch_size() or DEFAULT_IMAGE_PATCH_SIZE)
        if not text_only and pending_groups:
            from k9bench.frame_cache import FrameCache, SamplingSettings
            from k9bench.video import DecoderUnavailable, default_min_pixels

            floor = frames.min_pixels or default_min_pixels(patch)
            if frames.max_pixels is not None and frames.max_pixels < floor:
                log.error("--max_pixels %d is below the per-frame minimum %d (--min_pixels, or qwen-vl-utils' default for patch size %d); "
                          "raise --max_pixels or lower --min_pixels", frames.max_pixels, floor, patch)
                return EXIT_USAGE
            overrides = getattr(backend, "sampling_overrides", lambda: {})() or {}
            sampling = SamplingSettings(
                fps=frames.fps, max_frames=frames.max_frames, max_pixels=frames.max_pixels, min_pixels=frames.min_pixels,
                image_patch_size=patch, decoder=frames.video_decoder, **overrides,
            )
            try:
                frame_cache = FrameCache(sampling, disk_dir=frames.frame_cache_dir)
            except DecoderUnavailable as exc:
                log.error("%s", exc)
                return EXIT_USAGE
        ctx = RunContext(
            model_name=model_name,
            max_frames=frames.max_frames,
            system_prompt=system_prompt,
            use_system_message=config.prompt.use_system_message,
            seed=config.generation.seed,
            generation=describe.get("generation") or {},
            attn_implementation=describe.get("attn_implementation"),
            text_only=text_only,
            settings=run_settings(config, describe, prompt_sha, patch),
            placement=config.prompt.placement,
        )
        try:
            stage.check(done, expected_after_load(ctx), fingerprint_of=record_fingerprint)
        except ResumeRefused as exc:
            return _resume_refused(str(exc))
        runner_obj = Runner(config, backend, ctx, sampling)
        runner_obj.stats.resumed = len(done)
        runner_obj.done = done
        if pending_groups:
            runner_obj.run(pending_groups, done, stage, frame_cache)
        else:
            log.info("every selected question already has a record in %s; writing the final file", stage.checkpoint)
    except Interrupted as exc:
        log.warning("stopped by %s: %d record(s) are safe in %s; rerun the same command to resume (exit %d)",
                    exc, len(done), stage.checkpoint, EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    except BackendUnavailable as exc:
        log.error("%s; %d record(s) are safe in %s: rerun the same command once the backend is back (exit %d)",
                  exc, len(done), stage.checkpoint, EXIT_BACKEND)
        return EXIT_BACKEND
    except KeyboardInterrupt:
        log.warning("interrupted: %d record(s) are safe in %s; rerun the same command to resume (exit %d)", len(done), stage.checkpoint, EXIT_SIGINT)
        return EXIT_SIGINT
    finally:
        stage.close()
        # From here on a signal has its default effect: the final write below is atomic and
        # the checkpoint stays until it has succeeded.
        _restore_signal_handlers(previous_handlers)
        if backend is not None:
            backend.close()

    runner = runner_obj
    records = [QuestionRecord.from_dict(done[q.idx], where=f"{stage.where}: idx {q.idx}") for g in groups for q in g.questions]
    order = {q.idx: n for n, q in enumerate(selection)}
    records.sort(key=lambda r: order[r.idx])
    failures: dict[str, int] = {}
    for r in records:
        if r.failed:
            failures[r.error_class or "error"] = failures.get(r.error_class or "error", 0) + 1
    meta = final_meta(
        config, argv, records=records, failures=failures, model_name=model_name, describe=describe,
        image_patch_size=patch, prompt=(system_prompt, prompt_source), loaded=loaded, stats=runner.stats, started=started,
        frame_cache=frame_cache, download_summary=download_summary,
    )
    try:
        stage.finish(RecordsArtifact(records, meta).to_dict())
    except (OSError, ValueError, TypeError) as exc:
        log.error("cannot write %s: %s (the checkpoint %s is kept)", output, exc, stage.checkpoint)
        return EXIT_ERROR
    log.info("wrote %s: %d record(s), %d failed%s", output, len(records), meta["failed_count"],
             f" ({', '.join(f'{k}: {v}' for k, v in sorted(failures.items()))})" if failures else "")
    return _all_failed_exit([r.to_dict() for r in records], output)


def _all_failed_exit(records: list[dict], output: Path) -> int:
    """EXIT_ERROR when every record failed (nothing was answered), else EXIT_OK.

    Scoring such a file would report 0% for a broken setup (no videos, a dead server), not for the
    model, so the run says it cannot be trusted; the file is kept for inspection.
    """
    if not records or not all(r.get("error") is not None for r in records):
        return EXIT_OK
    classes: dict[str, int] = {}
    for r in records:
        key = r.get("error_class") or "error"
        classes[key] = classes.get(key, 0) + 1
    log.error("every one of the %d question(s) failed (%s): this run cannot be trusted. %s is kept for "
              "inspection; fix the cause and rerun the same command (failed records are retried).",
              len(records), ", ".join(f"{k}: {v}" for k, v in sorted(classes.items())), output)
    return EXIT_ERROR


__all__ = [
    "EXIT_BACKEND", "EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_SIGINT", "EXIT_USAGE",
    "FramePrefetcher", "PLACEMENTS", "Runner", "VideoGroup", "build_messages", "default_output_file", "group_by_video",
    "make_record", "output_path", "preflight", "run", "shard_groups", "shard_output_file",
]
