"""The inference loop's cross-video path: batches that span videos, prepared on the CPU ahead of the model.

Used by :class:`k9bench.inference.runner.Runner` when the batch size is above 1 and the backend
``prepares_batches()`` (the HF backend): :func:`k9bench.inference.batching.plan_batches` plans batches
that keep a video's questions together (a video is split only at a batch boundary);
:class:`k9bench.inference.pipeline.AheadPipeline` prepares each on worker threads (frames decoded, the
processor run: the backend's ``prepare_batch``) while the model answers the one before (``run_prepared``).
A video's frames are released after its last batch. A batch that fails is rerun by video on the generate
path; one that runs out of memory halves the batch size, and the batches already prepared at the old size
are planned again at the new one. The model's time waiting for the CPU is ``run_stats.prepare.wait_seconds``.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from k9bench.inference.backend import BackendUnavailable
from k9bench.inference.batching import BatchPart, PlannedBatch, plan_batches
from k9bench.inference.pipeline import AheadPipeline
from k9bench.inference.planning import chunks
from k9bench.inference.records import error_text as _error_text
from k9bench.inference.records import make_record

log = logging.getLogger(__name__)


def run_planned(runner: Any, pending: list, frame_cache: Any) -> None:
    """Batches spanning videos (:func:`k9bench.inference.batching.plan_batches`), each prepared on the CPU
    ahead of the model by :class:`k9bench.inference.pipeline.AheadPipeline` (frames decoded, processor run),
    answered by the backend's ``run_prepared``; a video's frames are released after its last batch. ``runner`` is the
    :class:`k9bench.inference.runner.Runner` whose records these are."""
    from k9bench.video.audio import AudioError
    from k9bench.video.sampling import VideoError

    rate = runner.audio_rate()
    cursor = [0] * len(pending)
    choice = runner.choice
    issued: list[PlannedBatch] = []
    """Batches handed to the pipeline and not yet answered (prepared or being prepared at their planned size)."""

    def batches() -> Iterator[PlannedBatch]:
        # planned with the batch size in use, from what no batch has taken yet (pulled on this thread)
        size = choice.batch_size
        base = list(cursor)
        remaining = [len(qs) - base[g] for g, (_, qs) in enumerate(pending)]
        for planned in plan_batches(remaining, size):
            parts = tuple(BatchPart(p.group, p.start + base[p.group], p.stop + base[p.group]) for p in planned.parts)
            for p in parts:
                cursor[p.group] = p.stop
            batch = PlannedBatch(parts, planned.release)
            issued.append(batch)
            yield batch

    def replan() -> int:
        # after an out-of-memory halving: the batches prepared ahead at the old size go back, in order, to be
        # planned again at the new size (they are the last ones taken of each video, so what is left stays contiguous)
        for batch in issued:
            for p in batch.parts:
                cursor[p.group] = min(cursor[p.group], p.start)
        back = len(issued)
        issued.clear()
        return back

    workers = max(2, min(PREPARE_WORKERS_MAX, (os.cpu_count() or 2) // 2))
    depth = max(2, runner.config.frames.prefetch_videos)
    decode_pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="k9bench-decode") if frame_cache is not None else None

    def media(path: Path) -> tuple:
        frames = frame_cache.get(path)
        return frames, (frame_cache.get_audio(path, rate) if rate is not None else None)

    def prepare(batch: PlannedBatch) -> ReadyBatch:
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
            for q in questions[part.start:part.stop]:
                ready.rows.append((group, q, frames, audio))
        if ready.rows:
            ready.requests = [runner.requests_for([q], frames, group.path, audio)[0] for group, q, frames, audio in ready.rows]
            try:
                ready.prepared = runner.backend.prepare_batch(ready.requests)
            except Exception as exc:  # the batch is rerun by video on the generate path, which records failures
                ready.prepare_error = exc
        return ready

    totals: dict[str, float] = {}
    try:
        while True:
            size = choice.batch_size
            ahead = AheadPipeline(prepare, workers=workers, depth=depth)
            try:
                for item in ahead.run(batches()):
                    if item.error is not None:
                        raise item.error
                    issued.remove(item.item)
                    ready = item.value
                    for questions, exc in ready.failed:
                        runner.video_failed(questions, exc)
                    if ready.rows:
                        answer_ready(runner, ready)
                    if frame_cache is not None:
                        for g in item.item.release:
                            frame_cache.release(pending[g][0].path)
                    if choice.batch_size != size:
                        break
            finally:
                ahead.close()
                _add_stats(totals, ahead.stats.to_dict())
            if choice.batch_size == size:
                break
            log.info("%d batch(es) prepared at %d question(s) planned again at %d", replan(), size, choice.batch_size)
    finally:
        if decode_pool is not None:
            decode_pool.shutdown(wait=False, cancel_futures=True)
        runner.stats.frame_wait_seconds = totals.get("wait_seconds", 0.0)
        runner.stats.prepare = {**totals, "decode_workers": workers if decode_pool else 0}



def answer_ready(runner: Any, ready: "ReadyBatch") -> None:
    """Records for a prepared batch: the backend's answers, or (it failed) the batch rerun by video on the generate path."""
    failure = None
    if ready.prepare_error is not None:
        failure = (_error_text(ready.prepare_error), False)
    else:
        t0 = time.perf_counter()
        try:
            outputs = runner.backend.run_prepared(ready.prepared)
            if len(outputs) != len(ready.rows):
                raise RuntimeError(f"backend returned {len(outputs)} outputs for {len(ready.rows)} requests")
        except BackendUnavailable:
            raise
        except Exception as exc:
            failure = (_error_text(exc), runner.backend.is_out_of_memory(exc))
        finally:
            runner.stats.generate_seconds += time.perf_counter() - t0
    if failure is None:
        for (group, q, frames, audio), out in zip(ready.rows, outputs):
            runner.emit(make_record(q, runner.ctx, output=out, frames=frames, audio=audio))
        return
    # out of the except block (the failed batch's tensors are gone): rerun by video on the generate path
    error_text, out_of_memory = failure
    size = 1
    if out_of_memory:
        runner.backend.recover_from_out_of_memory()
        size = runner.choice.halve()
        log.warning("batch of %d questions ran out of memory; batch size now %d", len(ready.rows), size)
    runner.stats.batch_fallbacks += 1
    log.warning("batch of %d question(s) failed (%s); rerunning it by video at batch size %d", len(ready.rows), error_text, size)
    by_video: dict[str, tuple] = {}
    for group, q, frames, audio in ready.rows:
        by_video.setdefault(str(group.path), (group, frames, audio, []))[3].append(q)
    for group, frames, audio, questions in by_video.values():
        for chunk in chunks(questions, size):
            runner.run_batch(group, chunk, frames, audio)


def _add_stats(totals: dict, stats: dict) -> None:
    """Sum one pipeline's :class:`~k9bench.inference.pipeline.PipelineStats` into ``totals`` (a run re-planned
    after an out-of-memory error has one pipeline per batch size)."""
    for key, value in stats.items():
        if key in ("workers", "depth", "max_wait_seconds"):
            totals[key] = max(totals.get(key, 0), value)
        else:
            totals[key] = totals.get(key, 0) + value


PREPARE_WORKERS_MAX = 8
"""Most threads decoding videos and preparing batches ahead of the model (half the CPU cores, at least 2, at most this)."""


@dataclass
class ReadyBatch:
    """A planned batch after its CPU preparation."""

    planned: Any
    rows: list = field(default_factory=list)
    """``(group, question, frames, audio)`` per question, in batch order."""
    failed: list = field(default_factory=list)
    """``(questions, exception)`` for videos whose frames or soundtrack cannot be read."""
    requests: list = field(default_factory=list)
    prepared: Any = None
    prepare_error: BaseException | None = None


__all__ = ["PREPARE_WORKERS_MAX", "ReadyBatch", "answer_ready", "run_planned"]
