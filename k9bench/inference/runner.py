"""The inference loop: the questions of a run answered batch by batch, each record checkpointed at once.

``--batch_size`` (default ``auto``) is resolved once by the backend (:meth:`Runner._choose_batch_size`; the HF
backend's ``auto`` is 1 on CPU and, on a GPU, the largest batch the free memory holds,
:func:`k9bench.inference.hf.batching.auto_batch_size`) and recorded in ``run_stats.batch_size``.

Two paths:

- batch size 1, or a backend whose ``prepares_batches()`` is False (the OpenAI backend): video by video, each
  video's questions in batches of the batch size within that video (:meth:`Runner._run_by_video`);
  a background thread decodes the next videos' frames (:class:`k9bench.inference.pipeline.FramePrefetcher`).
- batch size > 1 with a backend that ``prepares_batches()`` (HF, vLLM): :meth:`Runner._run_planned`, batches that
  span videos (:func:`k9bench.inference.batching.plan_batches`: questions stay grouped by video, a video is split
  only at a batch boundary), each prepared on the CPU ahead of the model by
  :class:`k9bench.inference.pipeline.AheadPipeline` (frames decoded on worker threads, the backend's
  ``prepare_batch``) and answered by its ``run_prepared`` (:meth:`Runner._answer_ready`). A video's frames are
  released after its last batch. The model's time waiting for the CPU is ``run_stats.prepare.wait_seconds``. A
  batch that runs out of memory halves the batch size (``run_stats.batch_size.history``) and is rerun video by
  video at the new size; the batches planned after it are planned at the new size, and those prepared ahead at
  the old size are rerun the same way.

Each video is decoded once (:class:`k9bench.video.cache.FrameCache`), and its file hashed once, on the
decoding thread (the record's ``video_file``); with ``--audio`` its soundtrack is read once too.

A failure is a record with ``error`` and ``error_class`` (``missing_video``, ``decode_error``,
``no_audio_stream`` and ``audio_decode_error`` under ``--audio``, ``oom``, ``generation_error``,
``question_too_long``, and a backend's own classes, :func:`k9bench.inference.records.error_class_of`: ``request_too_large``,
``output_limit``) and never stops the run. A batch that fails is rerun question by question; a
question that runs out of accelerator memory is retried once with half the frames. Progress goes to the
log (:class:`k9bench.progress.ProgressLog`): a bar on a terminal, otherwise a line at least every minute
and at each 10%.

The stage around the loop (files, resume, signals, the final write) is :mod:`k9bench.inference.stage`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from k9bench.artifacts import QuestionRecord
from k9bench.inference.backend import Backend, BackendError, BackendUnavailable, GenerationOutput, GenerationRequest
from k9bench.inference.batching import PlannedBatch, plan_batches
from k9bench.inference.pipeline import AheadPipeline, BatchesInFlight, FramePrefetcher
from k9bench.inference.planning import EXIT_BACKEND, PLACEMENTS, UsageError, VideoGroup, build_messages, chunks, question_too_long
from k9bench.inference.records import RunContext, RunStats, error_class_of, make_record
from k9bench.inference.records import error_text as _error_text
from k9bench.inference.settings import RunConfig
from k9bench.stage import EXIT_FAILED as EXIT_ERROR
from k9bench.stage import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, deferred

if TYPE_CHECKING:
    from k9bench.data.dataset import Question
    from k9bench.video.sampling import Frames

log = logging.getLogger(__name__)

PREPARE_WORKERS_MAX = 8
"""Most threads decoding videos and preparing batches ahead of the model (half the CPU cores, at least 2, at most this)."""


@dataclass
class ReadyBatch:
    """A planned batch after its CPU preparation."""

    planned: PlannedBatch
    rows: list = field(default_factory=list)
    """``(group, question, frames, audio)`` per question, in batch order."""
    failed: list = field(default_factory=list)
    """``(questions, exception)`` for videos whose frames or soundtrack cannot be read."""
    prepared: Any = None
    prepare_error: BaseException | None = None


# --------------------------------------------------------------------------- the loop


class Runner:
    """One invocation of the inference loop (see the module doc)."""

    def __init__(self, config: RunConfig, backend: Backend, ctx: RunContext, sampling: Any):
        self.config = config
        self.backend = backend
        self.ctx = ctx
        self.sampling = sampling
        self.stats = RunStats()
        self.checkpoint: Any = None
        self.frame_cache: Any = None
        self.progress: Any = None
        self._paths: dict[str, Path] = {}
        self._half_cache: dict = {}
        self._emit_lock = threading.RLock()
        self._stopped = False

    # -- one batch -------------------------------------------------------

    def requests_for(self, questions: list, frames: "Frames | None", path: Path | None = None, audio: Any = None) -> list[GenerationRequest]:
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
            with self._emit_lock:  # batches may run on worker threads (see BatchesInFlight)
                self.stats.generate_seconds += time.perf_counter() - t0
        if len(outputs) != len(requests):
            raise RuntimeError(f"backend returned {len(outputs)} outputs for {len(requests)} requests")
        return outputs

    def _half_frames(self, group: VideoGroup, frames: "Frames") -> "Frames":
        from dataclasses import replace

        from k9bench.video.sampling import sample

        key = (str(group.path), frames.num_frames)
        cached = self._half_cache.get(key)
        if cached is None:
            settings = replace(self.sampling, max_frames=max(2, frames.num_frames // 2))
            cached = sample(group.path, **settings.sample_kwargs())
            self._half_cache = {key: cached}  # the other questions of this video reuse it
        return cached

    def _run_one(self, group: VideoGroup, question: "Question", frames: "Frames | None", audio: Any = None) -> QuestionRecord:
        try:
            out = self._generate(self.requests_for([question], frames, group.path, audio))[0]
            return make_record(question, self.ctx, output=out, frames=frames, audio=audio)
        except BackendUnavailable:
            raise
        except Exception as exc:
            if not self.backend.is_out_of_memory(exc):
                log.warning("idx %s: generation failed: %s", question.idx, _error_text(exc))
                return make_record(question, self.ctx, prompt=self._prompt_for(question, frames is not None), frames=frames, error=exc, error_class=error_class_of(exc), audio=audio)
            first_error = _error_text(exc)
        # out of memory: free what we can and retry once at half the frames
        self.backend.recover_from_out_of_memory()
        with self._emit_lock:  # batches may run on worker threads (see BatchesInFlight)
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
            out = self._generate(self.requests_for([question], fewer, group.path, audio))[0]
            return make_record(question, self.ctx, output=out, frames=fewer, oom_retry=info, audio=audio)
        except BackendUnavailable:
            raise
        except Exception as exc:
            error_text = _error_text(exc)
            error_class = "oom" if self.backend.is_out_of_memory(exc) else error_class_of(exc)
        if error_class == "oom":
            self.backend.recover_from_out_of_memory()  # out of the except block, as above
        log.warning("idx %s: failed again with %d frames: %s", question.idx, fewer.num_frames, error_text)
        return make_record(question, self.ctx, prompt=self._prompt_for(question, True), frames=fewer, error=error_text, error_class=error_class, oom_retry=info, audio=audio)

    def run_batch(self, group: VideoGroup, questions: list, frames: "Frames | None", audio: Any = None) -> None:
        if len(questions) == 1:
            self.emit(self._run_one(group, questions[0], frames, audio))
            return
        failure = None
        try:
            outputs = self._generate(self.requests_for(questions, frames, group.path, audio))
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
                self.emit(self._run_one(group, q, frames, audio))
            return
        for q, out in zip(questions, outputs):
            self.emit(make_record(q, self.ctx, output=out, frames=frames, audio=audio))

    def emit(self, record: QuestionRecord) -> None:
        with self._emit_lock:  # batches may finish on worker threads (see BatchesInFlight)
            if self._stopped:
                return  # the run was interrupted: the checkpoint is closed, this answer is dropped
            self._emit_locked(record)

    def _emit_locked(self, record: QuestionRecord) -> None:
        if self.frame_cache is not None and record.scene_name in self._paths:  # also when the API sampled the file (num_frames null)
            identity = self.frame_cache.file_identity(self._paths[record.scene_name])  # hashed once, when decoded
            if identity is not None:
                record.extra["video_file"] = identity
        data = record.to_dict()
        with deferred():  # a stop signal waits until the line is whole on disk (k9bench.stage's policy)
            self.checkpoint.append(data)
            self.done[record.idx] = data
        if record.failed:
            self.stats.failed += 1
        else:
            self.stats.generated += 1
        if self.progress is not None:
            self.progress.update(1, failed=int(record.failed))

    # -- the loop --------------------------------------------------------

    def video_failed(self, questions: list, exc: BaseException) -> None:
        """Failed records for questions whose video (or soundtrack) cannot be read."""
        for q in questions:
            self.emit(make_record(q, self.ctx, prompt=self._prompt_for(q, True), error=str(exc),
                                   error_class=getattr(exc, "reason_class", None) or "decode_error"))

    def audio_rate(self) -> int | None:
        if not self.config.frames.audio or self.config.frames.text_only:
            return None
        rate = self.backend.audio_sampling_rate()
        if rate is None:
            raise BackendError(f"--audio: backend {self.backend.name!r} takes no soundtrack; run without --audio")
        return int(rate)

    def _refuse_too_long(self, pending: list) -> list:
        """Failed records (``question_too_long``) for questions above the size cap; the others, still pending."""
        kept = []
        for group, questions in pending:
            short = []
            for q in questions:
                why = question_too_long(q)
                if why is None:
                    short.append(q)
                else:
                    log.warning("idx %s: %s", q.idx, why)
                    self.emit(make_record(q, self.ctx, error=why, error_class="question_too_long"))
            if short:
                kept.append((group, short))
        return kept

    def run(self, groups: list[VideoGroup], done: dict, checkpoint: Any, frame_cache: Any) -> None:
        """Answer every question of ``groups`` not in ``done``; each record goes to ``checkpoint`` (``append``) at once."""
        from k9bench.progress import ProgressLog

        self.done = done
        self.checkpoint = checkpoint
        self.frame_cache = frame_cache
        self._paths = {g.scene_name: g.path for g in groups}
        pending = [(g, [q for q in g.questions if q.idx not in done]) for g in groups]
        pending = [(g, qs) for g, qs in pending if qs]
        total = sum(len(qs) for _, qs in pending)
        log.info("%d question(s) to run over %d video(s); %d already done", total, len(pending), self.stats.resumed)
        self.choice = self._choose_batch_size(total, len(pending))
        self.stats.batch_size = self.choice.to_dict()
        t0 = time.perf_counter()
        self.progress = ProgressLog("inference", total, unit="questions")
        planned = self.choice.batch_size > 1 and self.backend.prepares_batches()
        try:
            pending = self._refuse_too_long(pending)
            if planned:
                self._run_planned(pending, frame_cache)
            else:
                self._run_by_video(pending, frame_cache)
        except BaseException:
            with self._emit_lock:
                self._stopped = True  # batches still running on worker threads record nothing more
            raise
        finally:
            self.progress.close()
            self.progress = None
            self.stats.wall_seconds = time.perf_counter() - t0
            self.stats.batch_size = self.choice.to_dict()
            self.stats.decoding = self.backend.run_stats() or None

    def _choose_batch_size(self, questions: int, videos: int) -> Any:
        """``--batch_size`` resolved by the backend (``auto``: its memory rule; the base class: 1)."""
        f = self.config.frames
        choice = self.backend.choose_batch_size(self.config.generation.batch_size, questions=questions, videos=videos,
                                                max_frames=f.max_frames, max_pixels=f.max_pixels)
        log.info("batch size %d (%s: %s)", choice.batch_size, choice.requested, choice.reason)
        return choice

    def _run_by_video(self, pending: list, frame_cache: Any) -> None:
        """Today's loop: one video at a time, its questions in batches of the batch size (within the video)."""
        from k9bench.video.audio import AudioError
        from k9bench.video.sampling import VideoError

        prefetch = FramePrefetcher(frame_cache) if frame_cache is not None else None
        depth = max(0, self.config.frames.prefetch_videos)
        rate = self.audio_rate()
        in_flight = max(1, int(self.backend.max_batches_in_flight()))
        pipeline = BatchesInFlight(self.run_batch, prefetch, in_flight) if in_flight > 1 else None
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
                        self.video_failed(questions, exc)
                        prefetch.release(group.path)
                        continue
                if pipeline is not None:
                    pipeline.submit(group, chunks(questions, size), frames, audio)
                    continue
                for batch in chunks(questions, size):
                    self.run_batch(group, batch, frames, audio)
                if prefetch is not None:
                    prefetch.release(group.path)
            if pipeline is not None:
                pipeline.finish()
        finally:
            if prefetch is not None:
                self.stats.frame_wait_seconds = prefetch.wait_seconds
                prefetch.close()


    def _run_planned(self, pending: list, frame_cache: Any) -> None:
        """Batches spanning videos (:func:`k9bench.inference.batching.plan_batches` at the batch size in use), each
        prepared on the CPU ahead of the model (:class:`k9bench.inference.pipeline.AheadPipeline`: frames decoded, the
        backend's ``prepare_batch``) and answered by :meth:`_answer_ready`; a video's frames are released after its last batch."""
        from k9bench.video.audio import AudioError
        from k9bench.video.sampling import VideoError

        rate = self.audio_rate()
        workers = max(2, min(PREPARE_WORKERS_MAX, (os.cpu_count() or 2) // 2))
        decode_pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="k9bench-decode") if frame_cache is not None else None

        def media(path: Path) -> tuple:
            return frame_cache.get(path), (frame_cache.get_audio(path, rate) if rate is not None else None)

        def prepare(batch: PlannedBatch) -> ReadyBatch:  # on a worker thread
            ready = ReadyBatch(batch)
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
                ready.rows.extend((group, q, frames, audio) for q in questions[part.start:part.stop])
            if ready.rows:
                try:
                    ready.prepared = self.backend.prepare_batch([self.requests_for([q], f, g.path, a)[0] for g, q, f, a in ready.rows])
                except Exception as exc:  # answered by video on the generate path, which records failures (or stops the run)
                    ready.prepare_error = exc
            return ready

        ahead = AheadPipeline(prepare, workers=workers, depth=max(2, self.config.frames.prefetch_videos))
        try:
            for item in ahead.run(plan_batches([len(qs) for _, qs in pending], lambda: self.choice.batch_size)):
                if item.error is not None:
                    raise item.error
                for questions, exc in item.value.failed:
                    self.video_failed(questions, exc)
                if item.value.rows:
                    self._answer_ready(item.value)
                if frame_cache is not None:
                    for g in item.item.release:
                        frame_cache.release(pending[g][0].path)
        finally:
            ahead.close()
            if decode_pool is not None:
                decode_pool.shutdown(wait=False, cancel_futures=True)
            self.stats.frame_wait_seconds = ahead.stats.wait_seconds
            self.stats.prepare = {**ahead.stats.to_dict(), "decode_workers": workers if decode_pool else 0}

    def _answer_ready(self, ready: ReadyBatch) -> None:
        """Records for a prepared batch: the backend's answers; or, when its preparation or its run failed (or it was
        prepared at a size above the one in use after an out-of-memory error), the batch rerun by video on the
        generate path at the size in use."""
        failure = None
        size = self.choice.batch_size
        if isinstance(ready.prepare_error, BackendUnavailable):
            raise ready.prepare_error
        if ready.prepare_error is not None:
            failure = (_error_text(ready.prepare_error), False)
        elif len(ready.rows) > size:
            log.info("a batch of %d question(s) prepared before the batch size became %d: rerun at %d", len(ready.rows), size, size)
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
                    self.emit(make_record(q, self.ctx, output=out, frames=frames, audio=audio))
                return
        ready.prepared = None  # out of the except block, the failed batch's tensors released
        if failure is not None:
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
                self.run_batch(group, chunk, frames, audio)


__all__ = [
    "EXIT_BACKEND", "EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "PLACEMENTS", "PREPARE_WORKERS_MAX", "ReadyBatch",
    "Runner", "RunContext", "UsageError", "VideoGroup", "build_messages", "make_record",
]
