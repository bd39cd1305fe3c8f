"""The inference loop behind ``eval_video_llm.py``.

Questions are grouped by video (first-seen order) and, with ``--num_shards``, whole videos are
dealt to shards round-robin. Each video's questions go to the backend in batches of up to
``--batch_size`` (one video per batch, left-padded). While a batch generates, a background
thread decodes the frames of the next videos (:class:`FramePrefetcher`), each video once
(:class:`k9bench.video.FrameCache`).

Every finished question, failed or not, is appended at once to ``<output>.partial.jsonl``
(:class:`k9bench.artifacts.CheckpointLog`, fsynced). Rerunning the same command skips what is
there (failed records are retried unless ``--no_retry_failed``) and also reuses the records of an
existing final file. SIGTERM and SIGUSR1 stop the run at once (the checkpoint already holds
every finished question) with exit code :data:`EXIT_INTERRUPTED`; Ctrl-C gives
:data:`EXIT_SIGINT`. When every question has a record, the raw JSON (SPEC section 2 plus our
keys) is written atomically and the checkpoint removed.

A failure is a record with ``error`` and ``error_class`` (``missing_video``, ``decode_error``,
``oom``, ``generation_error``) and never stops the run. A batch that fails is rerun question by
question; a question that runs out of accelerator memory is retried once with half the frames.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from k9bench.answers import extract_answer, prompt_opens_thinking
from k9bench.artifacts import CheckpointLog, QuestionRecord, RecordsArtifact, checkpoint_path, load_records_artifact, now_iso, provenance, write_json_atomic
from k9bench.layout import short_model_name
from k9bench.progress import progress_enabled
from k9bench.inference.backend import Backend, BackendError, BackendUnavailable, GenerationOutput, GenerationRequest, create_backend
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

DEFAULT_MAX_NEW_TOKENS = 2048
DEFAULT_MAX_NEW_TOKENS_THINKING = 3072
ERROR_CLASSES = ("missing_video", "decode_error", "oom", "generation_error")
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


def default_output_file(model: str, max_frames: int, max_samples: int) -> str:
    """The launcher's file name: ``raw_<model>_mf<frames>_n<samples>.json``."""
    return f"raw_{short_model_name(model)}_mf{max_frames}_n{max_samples}.json"


def shard_output_file(output: str | Path, num_shards: int, shard_id: int) -> Path:
    """``x.json`` -> ``x.shard{i}of{n}.json`` for a sharded run (unchanged when not sharded or already named so)."""
    output = Path(output)
    tag = f"shard{shard_id}of{num_shards}"
    if num_shards <= 1 or tag in output.name:
        return output
    suffix = output.suffix or ".json"
    return output.with_name(f"{output.name[: -len(output.suffix)] if output.suffix else output.name}.{tag}{suffix}")


def build_messages(question: str, system_prompt: str, use_system_message: bool, with_video: bool) -> list[dict]:
    """The chat for one question: system message, then a user turn with the video and the question.

    With ``use_system_message`` False, the system text opens the user turn instead (for models
    whose template has no system role); the options are never shown (SPEC section 3).
    """
    user: list[dict] = []
    if with_video:
        user.append({"type": "video"})
    text = question if use_system_message else f"{system_prompt}\n\n{question}"
    user.append({"type": "text", "text": text})
    messages: list[dict] = []
    if use_system_message:
        messages.append({"role": "system", "content": [{"type": "text", "text": system_prompt}]})
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
    """Other settings that shape the answers (see :func:`run_settings`), kept in each record as
    ``run_settings`` so that a resume cannot mix records made with different ones."""


RESUME_CHECKED_KEYS = ("generation", "seed", "attn_implementation", "text_only", "run_settings")
"""Record keys that must equal this run's values for a finished record to be reused on resume."""

BACKEND_SETTING_KEYS = ("dtype", "video_transport", "frame_size", "jpeg_quality", "image_detail", "request_params")
"""Keys of a backend's ``describe()`` copied into ``run_settings`` when the backend has them."""


def run_settings(args: argparse.Namespace, describe: dict, system_prompt: str, text_only: bool, image_patch_size: int | None) -> dict:
    """The settings besides model, frame budget, generation, seed and attention kernel that change
    what the model sees or how it computes: backend, weight dtype, system prompt, frame sampling."""
    from k9bench.prompts import sha256

    out: dict[str, Any] = {"backend": describe.get("name")}
    out.update({k: describe[k] for k in BACKEND_SETTING_KEYS if k in describe})
    out["system_prompt_sha256"] = sha256(system_prompt)
    out["use_system_message"] = args.use_system_message
    out["frames"] = None if text_only else {
        "fps": args.fps, "max_pixels": args.max_pixels, "min_pixels": args.min_pixels,
        "image_patch_size": image_patch_size, "decoder": args.video_decoder,
    }
    return out


def _json_normal(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value))


def _setting_diffs(have: Any, want: Any, path: str) -> list[str]:
    if isinstance(want, dict) and isinstance(have, dict):
        return [d for k in sorted(want) for d in _setting_diffs(have.get(k), want[k], f"{path}.{k}")]
    return [] if have == want else [f"{path}: {have!r} there, {want!r} now"]


def settings_mismatch(done: dict, expected: dict) -> str | None:
    """Why a finished record cannot be reused by this run (it was made with other settings), or None.

    ``expected`` maps record keys (:data:`RESUME_CHECKED_KEYS`) to this run's values; for a dict
    value only its keys are compared (recursively), so a partial dict checks part of the settings.
    Keys a record lacks are not compared (records written before a key existed are not refused).
    """
    expected = _json_normal(expected)
    for idx in sorted(done):
        rec = done[idx]
        diffs = [d for key, want in expected.items() if key in rec for d in _setting_diffs(rec[key], want, key)]
        if diffs:
            return f"idx {idx} was produced with other settings ({'; '.join(diffs)})"
    return None


def settings_known_before_load(args: argparse.Namespace, system_prompt: str, text_only: bool) -> dict:
    """The part of the resume check that needs no backend (a finished file is checked before any load).

    ``max_pixels`` and the patch size are left to the full check: a backend may adjust them.
    """
    from k9bench.prompts import sha256

    generation: dict[str, Any] = {"max_new_tokens": args.max_new_tokens}
    for key in ("do_sample", "temperature", "top_p", "top_k"):
        if getattr(args, key, None) is not None:
            generation[key] = getattr(args, key)
    settings: dict[str, Any] = {"system_prompt_sha256": sha256(system_prompt), "use_system_message": args.use_system_message}
    if not text_only:
        settings["frames"] = {"fps": args.fps, "min_pixels": args.min_pixels, "decoder": args.video_decoder}
    return {"generation": generation, "seed": args.seed, "text_only": text_only, "run_settings": settings}


def _resume_refused(where: Path, mismatch: str) -> int:
    log.error("%s: %s; rerun with the flags that produced it (its records keep generation, seed, attn_implementation "
              "and run_settings), or use another --output_file", where, mismatch)
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


class Runner:
    """One invocation of the inference loop (see the module doc)."""

    def __init__(self, args: argparse.Namespace, backend: Backend, ctx: RunContext, sampling: Any, frame_cache_dir: str | None):
        self.args = args
        self.backend = backend
        self.ctx = ctx
        self.sampling = sampling
        self.frame_cache_dir = frame_cache_dir
        self.stats = RunStats()
        self.checkpoint: CheckpointLog | None = None
        self.bar = None
        self._half_cache: dict = {}
        self._emit_lock = threading.RLock()
        self._stopped = False

    # -- one batch -------------------------------------------------------

    def _requests(self, questions: list, frames: "Frames | None", path: Path | None = None) -> list[GenerationRequest]:
        return [
            GenerationRequest(
                key=q.idx,
                messages=build_messages(q.question, self.ctx.system_prompt, self.ctx.use_system_message, frames is not None),
                frames=frames,
                seed=self.ctx.seed,
                video_path=str(path) if frames is not None and path is not None else None,
            )
            for q in questions
        ]

    def _prompt_for(self, question: "Question", with_video: bool) -> str:
        try:
            return self.backend.render_prompt(build_messages(question.question, self.ctx.system_prompt, self.ctx.use_system_message, with_video))
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

    def _run_one(self, group: VideoGroup, question: "Question", frames: "Frames | None") -> QuestionRecord:
        try:
            out = self._generate(self._requests([question], frames, group.path))[0]
            return make_record(question, self.ctx, output=out, frames=frames)
        except BackendUnavailable:
            raise
        except Exception as exc:
            if not self.backend.is_out_of_memory(exc):
                log.warning("idx %s: generation failed: %s", question.idx, _error_text(exc))
                return make_record(question, self.ctx, prompt=self._prompt_for(question, frames is not None), frames=frames, error=exc, error_class="generation_error")
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
                               oom_retry={"first_error": first_error, "retried": False, "resample_error": _error_text(exc)})
        info = {"first_error": first_error, "retried": True, "original_num_frames": frames.num_frames, "retry_num_frames": fewer.num_frames}
        log.warning("idx %s: out of memory with %d frames; retrying once with %d", question.idx, frames.num_frames, fewer.num_frames)
        try:
            out = self._generate(self._requests([question], fewer, group.path))[0]
            return make_record(question, self.ctx, output=out, frames=fewer, oom_retry=info)
        except BackendUnavailable:
            raise
        except Exception as exc:
            error_text = _error_text(exc)
            error_class = "oom" if self.backend.is_out_of_memory(exc) else "generation_error"
        if error_class == "oom":
            self.backend.recover_from_out_of_memory()  # out of the except block, as above
        log.warning("idx %s: failed again with %d frames: %s", question.idx, fewer.num_frames, error_text)
        return make_record(question, self.ctx, prompt=self._prompt_for(question, True), frames=fewer, error=error_text, error_class=error_class, oom_retry=info)

    def _run_batch(self, group: VideoGroup, questions: list, frames: "Frames | None") -> None:
        if len(questions) == 1:
            self._emit(self._run_one(group, questions[0], frames))
            return
        failure = None
        try:
            outputs = self._generate(self._requests(questions, frames, group.path))
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
                self._emit(self._run_one(group, q, frames))
            return
        for q, out in zip(questions, outputs):
            self._emit(make_record(q, self.ctx, output=out, frames=frames))

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

    def run(self, groups: list[VideoGroup], done: dict, checkpoint: CheckpointLog, frame_cache: Any) -> None:
        from tqdm.auto import tqdm

        from k9bench.video import VideoError

        self.done = done
        self.checkpoint = checkpoint
        pending = [(g, [q for q in g.questions if q.idx not in done]) for g in groups]
        pending = [(g, qs) for g, qs in pending if qs]
        total = sum(len(qs) for _, qs in pending)
        log.info("%d question(s) to run over %d video(s); %d already done", total, len(pending), self.stats.resumed)
        prefetch = FramePrefetcher(frame_cache) if frame_cache is not None else None
        depth = max(0, self.args.prefetch_videos)
        t0 = time.perf_counter()
        self.bar = tqdm(total=total, unit="q", desc="inference", disable=progress_enabled(), dynamic_ncols=True)
        in_flight = int(getattr(self.backend, "max_batches_in_flight", lambda: 1)() or 1)
        pipeline = _BatchPipeline(self, prefetch, in_flight) if in_flight > 1 else None
        try:
            for i, (group, questions) in enumerate(pending):
                frames = None
                if prefetch is not None:
                    for ahead, _ in pending[i:i + 1 + depth]:
                        prefetch.schedule(ahead.path)
                    try:
                        frames = prefetch.get(group.path)
                    except VideoError as exc:
                        for q in questions:
                            self._emit(make_record(q, self.ctx, prompt=self._prompt_for(q, True), error=str(exc), error_class=exc.reason_class))
                        prefetch.release(group.path)
                        continue
                if pipeline is not None:
                    pipeline.submit(group, chunks(questions, self.args.batch_size), frames)
                    continue
                for batch in chunks(questions, self.args.batch_size):
                    self._run_batch(group, batch, frames)
                if prefetch is not None:
                    prefetch.release(group.path)
            if pipeline is not None:
                pipeline.finish()
        except BaseException:
            with self._emit_lock:
                self._stopped = True  # batches still running on worker threads record nothing more
            raise
        finally:
            self.bar.close()
            self.bar = None
            if prefetch is not None:
                self.stats.frame_wait_seconds = prefetch.wait_seconds
                prefetch.close()
            self.stats.wall_seconds = time.perf_counter() - t0


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

    def _work(self, group: VideoGroup, batch: list, frames: "Frames | None") -> None:
        error: BaseException | None = None
        try:
            self.runner._run_batch(group, batch, frames)
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

    def submit(self, group: VideoGroup, batches, frames: "Frames | None") -> None:
        """Start every batch of one video (waiting for free slots; signals stay deliverable)."""
        batches = list(batches)
        self.remaining[str(group.path)] = self.remaining.get(str(group.path), 0) + len(batches)
        for batch in batches:
            while not self.slots.acquire(timeout=0.1):
                self._collect(block=False)
            threading.Thread(target=self._work, args=(group, batch, frames), name="k9bench-batch", daemon=True).start()
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


def resolve_max_new_tokens(args: argparse.Namespace) -> int:
    if args.max_new_tokens is not None:
        return args.max_new_tokens
    return DEFAULT_MAX_NEW_TOKENS_THINKING if args.thinking_mode else DEFAULT_MAX_NEW_TOKENS


def validate_args(args: argparse.Namespace) -> None:
    """Raise :class:`UsageError` for flag values that cannot work."""
    checks = [
        (args.batch_size >= 1, f"--batch_size must be >= 1 (got {args.batch_size})"),
        (args.max_frames == 0 or args.max_frames >= 2,
         f"--max_frames must be 0 (text only) or at least 2 (qwen-vl-utils rounds frame counts to even numbers) (got {args.max_frames})"),
        (args.fps > 0, f"--fps must be > 0 (got {args.fps})"),
        (args.max_new_tokens is None or args.max_new_tokens >= 1, f"--max_new_tokens must be >= 1 (got {args.max_new_tokens})"),
        (args.num_shards >= 1, f"--num_shards must be >= 1 (got {args.num_shards})"),
        (0 <= args.shard_id < args.num_shards, f"--shard_id must be in [0, {args.num_shards}) (got {args.shard_id})"),
        (args.start_idx >= 0, f"--start_idx must be >= 0 (got {args.start_idx})"),
        (args.max_pixels is None or args.max_pixels > 0, f"--max_pixels must be > 0 (got {args.max_pixels})"),
        (args.min_pixels is None or args.min_pixels > 0, f"--min_pixels must be > 0 (got {args.min_pixels})"),
        (args.prefetch_videos >= 0, f"--prefetch_videos must be >= 0 (got {args.prefetch_videos})"),
        (args.temperature is None or args.temperature >= 0, f"--temperature must be >= 0 (got {args.temperature})"),
        (not (args.do_sample is True and args.temperature == 0), "--do_sample with --temperature 0 cannot sample; use --greedy"),
        (args.top_p is None or 0 < args.top_p <= 1, f"--top_p must be in (0, 1] (got {args.top_p})"),
        (args.top_k is None or args.top_k >= 0, f"--top_k must be >= 0 (got {args.top_k})"),
    ]
    for ok, message in checks:
        if not ok:
            raise UsageError(message)


def _load_done(output: Path, checkpoint: CheckpointLog, selected: dict, ctx: RunContext, retry_failed: bool) -> dict:
    """Records already finished (final file first, then the checkpoint), restricted to the selection."""
    from k9bench.artifacts import ArtifactError

    done: dict[int, dict] = {}
    if output.exists():
        try:
            art = load_records_artifact(output)
        except ArtifactError as exc:
            raise UsageError(f"{output}: exists but cannot be resumed from ({exc}); move it away or pick another --output_file") from None
        for rec in art.records:
            done[rec.idx] = rec.to_dict()
    try:
        done.update(checkpoint.load())
    except Exception as exc:
        raise UsageError(f"{checkpoint.path}: cannot be resumed from ({exc}); move it away to start over") from None
    done = {k: v for k, v in done.items() if k in selected}
    for idx, rec in done.items():
        for key, expected in (("model_name", ctx.model_name), ("max_frames", ctx.max_frames)):
            if rec.get(key) != expected:
                raise UsageError(
                    f"{checkpoint.path if checkpoint.path.exists() else output}: idx {idx} was produced with {key}={rec.get(key)!r}, "
                    f"this run has {key}={expected!r}; use another --output_file or remove the old files"
                )
    if retry_failed:
        failed = [k for k, v in done.items() if v.get("error") is not None]
        if failed:
            log.info("retrying %d failed record(s) from the previous run", len(failed))
        for k in failed:
            del done[k]
    return done


def auto_download(groups: list[VideoGroup], video_dir: str, *, cookies: str | None = None,
                  cookies_from_browser: str | None = None, workers: int = 4) -> dict:
    """Fetch the missing videos of ``groups`` with :func:`k9bench.download.download_videos`; return a summary."""
    from k9bench.download import DownloadConfig, download_videos

    missing = {g.scene_name: g.video_url for g in groups if not g.path.exists()}
    if not missing:
        log.info("--auto_download: every video is already in %s", video_dir)
        return {"requested": 0}
    log.info("--auto_download: fetching %d missing video(s) into %s", len(missing), video_dir)
    config = DownloadConfig(progress=progress_enabled() is not True, cookies=cookies,
                            cookies_from_browser=cookies_from_browser, workers=workers)
    report = download_videos(missing, video_dir, config)
    log.info("--auto_download: %s", report.summary_line())
    failed = {r.scene_name: f"{r.error_class}: {r.message}" for r in report.failed}
    for scene, why in failed.items():
        log.warning("--auto_download: %s failed (%s); its questions will be recorded as missing_video", scene, why)
    return {"requested": len(missing), "counts": report.counts, "failed": failed}


def final_meta(args: argparse.Namespace, argv: list[str] | None, *, records: list, failures: dict, model_name: str, describe: dict | None,
               text_only: bool, image_patch_size: int | None, prompt: tuple[str, str], loaded: Any, stats: RunStats, started: str,
               frame_cache: Any, download_summary: dict | None) -> dict:
    """The raw file's top-level keys besides ``individual_results`` (see the README section)."""
    from k9bench.prompts import sha256

    return {
        "total_count": len(records),
        "model_name": model_name,
        "model_name_or_path": args.model_name_or_path,
        "num_shards": args.num_shards,
        "shard_id": args.shard_id,
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
        "inference": {
            "backend": describe,
            "text_only": text_only,
            "batch_size": args.batch_size,
            "seed": args.seed,
            "thinking_mode": args.thinking_mode,
            "max_new_tokens": args.max_new_tokens,
            "frames": None if text_only else {
                "fps": args.fps, "max_frames": args.max_frames, "max_pixels": args.max_pixels, "min_pixels": args.min_pixels,
                "image_patch_size": image_patch_size, "decoder": args.video_decoder,
                "frame_cache_dir": args.frame_cache_dir,
            },
            "prompt": {
                "system_prompt_source": prompt[1],
                "system_prompt_sha256": sha256(prompt[0]),
                "use_system_message": args.use_system_message,
            },
            "dataset": {
                "source": loaded.source, "split": args.split, "start_idx": args.start_idx, "end_idx": args.end_idx,
                "max_samples": args.max_samples, "dropped_rows": len(loaded.dropped),
            },
        },
        "run_stats": {
            "started_at": started,
            "finished_at": now_iso(),
            **stats.__dict__,
            "questions_per_second": (stats.generated + stats.failed) / stats.wall_seconds if stats.wall_seconds else None,
            "frame_cache": frame_cache.summary() if frame_cache is not None else None,
            "auto_download": download_summary,
        },
        "provenance": provenance("eval_video_llm.py", argv, args),
    }


def run(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Run the whole inference (called by ``eval_video_llm.main``); returns the exit code."""
    from k9bench.dataset import DatasetError, load_questions, select_range
    from k9bench.prompts import load_prompt, sha256

    started = now_iso()
    try:
        validate_args(args)
        args.max_new_tokens = resolve_max_new_tokens(args)
        system_prompt, prompt_source = load_prompt("system_prompt", args.system_prompt_file)
        loaded = load_questions(args.dataset_name, args.split, drop_invalid=args.drop_invalid_rows)
    except (UsageError, DatasetError, FileNotFoundError) as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    end_idx = None if args.end_idx is None or args.end_idx < 0 else args.end_idx
    selection = select_range(loaded.questions, args.start_idx, end_idx, args.max_samples)
    if not selection:
        log.error("no question selected (--start_idx %s, --end_idx %s, --max_samples %s out of %d)", args.start_idx, args.end_idx, args.max_samples, len(loaded.questions))
        return EXIT_USAGE
    text_only = args.max_frames == 0
    groups = shard_groups(group_by_video(selection, args.video_dir), args.num_shards, args.shard_id)
    selected = {q.idx: q for g in groups for q in g.questions}
    if args.num_shards > 1:
        log.info("shard %d of %d: %d video(s), %d question(s)", args.shard_id, args.num_shards, len(groups), len(selected))
    if len(selected) < sum(len(g.questions) for g in groups):
        log.error("the selection holds duplicate idx values; each question needs a unique idx")
        return EXIT_USAGE

    output = Path(args.output_file or default_output_file(args.model_name_or_path, args.max_frames, args.max_samples))
    output = shard_output_file(output, args.num_shards, args.shard_id)
    if output.is_dir():
        log.error("--output_file %s is a folder; give the path of the raw JSON file to write", output)
        return EXIT_USAGE
    checkpoint = CheckpointLog(checkpoint_path(output))
    model_name = short_model_name(args.model_name_or_path)

    # Cheap checks of resumable state come before the model load.
    pre_ctx = RunContext(model_name, args.max_frames, system_prompt, args.use_system_message, args.seed, {}, None, text_only)
    try:
        done = _load_done(output, checkpoint, selected, pre_ctx, not args.no_retry_failed)
    except UsageError as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    # The settings known before the model loads (the rest are checked once it is loaded).
    mismatch = settings_mismatch(done, settings_known_before_load(args, system_prompt, text_only))
    if mismatch:
        return _resume_refused(checkpoint.path if checkpoint.path.exists() else output, mismatch)
    pending_groups = [g for g in groups if any(q.idx not in done for q in g.questions)]

    download_summary = None
    if args.auto_download and not text_only and pending_groups:
        try:
            download_summary = auto_download(
                pending_groups, args.video_dir, cookies=getattr(args, "download_cookies", None),
                cookies_from_browser=getattr(args, "download_cookies_from_browser", None),
                workers=getattr(args, "download_workers", 4),
            )
        except ValueError as exc:  # DownloadInputError
            log.error("--auto_download: %s", exc)
            return EXIT_USAGE

    if not text_only and pending_groups and not Path(args.video_dir).is_dir():
        # not one failed "missing_video" record per question for a mistyped folder
        log.error("--video_dir %s is not a folder; fetch the videos first (download_videos.py --output_dir %s) or pass --auto_download",
                  args.video_dir, args.video_dir)
        return EXIT_USAGE

    if not pending_groups and output.exists() and not checkpoint.path.exists():
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
            backend = create_backend(args)
            backend.load()
        except BackendError as exc:
            log.error("%s", exc)
            return EXIT_BACKEND
        describe = backend.describe()
        patch = None if text_only else (backend.frame_patch_size() or DEFAULT_IMAGE_PATCH_SIZE)
        if not text_only and pending_groups:
            from k9bench.frame_cache import FrameCache, SamplingSettings
            from k9bench.video import DecoderUnavailable, default_min_pixels

            floor = args.min_pixels or default_min_pixels(patch)
            if args.max_pixels is not None and args.max_pixels < floor:
                log.error("--max_pixels %d is below the per-frame minimum %d (--min_pixels, or qwen-vl-utils' default for patch size %d); "
                          "raise --max_pixels or lower --min_pixels", args.max_pixels, floor, patch)
                return EXIT_USAGE
            sampling = SamplingSettings(
                fps=args.fps, max_frames=args.max_frames, max_pixels=args.max_pixels, min_pixels=args.min_pixels,
                image_patch_size=patch, decoder=args.video_decoder,
            )
            try:
                frame_cache = FrameCache(sampling, disk_dir=args.frame_cache_dir)
            except DecoderUnavailable as exc:
                log.error("%s", exc)
                return EXIT_USAGE
        ctx = RunContext(
            model_name=model_name,
            max_frames=args.max_frames,
            system_prompt=system_prompt,
            use_system_message=args.use_system_message,
            seed=args.seed,
            generation=describe.get("generation") or {},
            attn_implementation=describe.get("attn_implementation"),
            text_only=text_only,
            settings=run_settings(args, describe, system_prompt, text_only, patch),
        )
        mismatch = settings_mismatch(done, {
            "generation": ctx.generation, "seed": ctx.seed, "attn_implementation": ctx.attn_implementation,
            "text_only": ctx.text_only, "run_settings": ctx.settings,
        })
        if mismatch:
            return _resume_refused(checkpoint.path if checkpoint.path.exists() else output, mismatch)
        runner_obj = Runner(args, backend, ctx, sampling, args.frame_cache_dir)
        runner_obj.stats.resumed = len(done)
        runner_obj.done = done
        if pending_groups:
            runner_obj.run(pending_groups, done, checkpoint, frame_cache)
        else:
            log.info("every selected question already has a record in %s; writing the final file", checkpoint.path)
    except Interrupted as exc:
        log.warning("stopped by %s: %d record(s) are safe in %s; rerun the same command to resume (exit %d)",
                    exc, len(done), checkpoint.path, EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    except BackendUnavailable as exc:
        log.error("%s; %d record(s) are safe in %s: rerun the same command once the backend is back (exit %d)",
                  exc, len(done), checkpoint.path, EXIT_BACKEND)
        return EXIT_BACKEND
    except KeyboardInterrupt:
        log.warning("interrupted: %d record(s) are safe in %s; rerun the same command to resume (exit %d)", len(done), checkpoint.path, EXIT_SIGINT)
        return EXIT_SIGINT
    finally:
        checkpoint.close()
        # From here on a signal has its default effect: the final write below is atomic and
        # the checkpoint stays until it has succeeded.
        _restore_signal_handlers(previous_handlers)
        if backend is not None:
            backend.close()

    runner = runner_obj
    records = [QuestionRecord.from_dict(done[q.idx], where=f"{checkpoint.path}: idx {q.idx}") for g in groups for q in g.questions]
    order = {q.idx: n for n, q in enumerate(selection)}
    records.sort(key=lambda r: order[r.idx])
    failures: dict[str, int] = {}
    for r in records:
        if r.failed:
            failures[r.error_class or "error"] = failures.get(r.error_class or "error", 0) + 1
    meta = final_meta(
        args, argv, records=records, failures=failures, model_name=model_name, describe=describe, text_only=text_only,
        image_patch_size=patch, prompt=(system_prompt, prompt_source), loaded=loaded, stats=runner.stats, started=started,
        frame_cache=frame_cache, download_summary=download_summary,
    )
    try:
        write_json_atomic(output, RecordsArtifact(records, meta).to_dict())
    except (OSError, ValueError, TypeError) as exc:
        log.error("cannot write %s: %s (the checkpoint %s is kept)", output, exc, checkpoint.path)
        return EXIT_ERROR
    checkpoint.remove()
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
    "FramePrefetcher", "Runner", "VideoGroup", "build_messages", "default_output_file", "group_by_video",
    "make_record", "run", "shard_groups", "shard_output_file",
]
