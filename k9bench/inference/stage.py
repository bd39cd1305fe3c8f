"""The inference stage: ``eval_video_llm.py`` behind the :class:`k9bench.stage.Stage` contract.

- :func:`build_parser`: the flags, generated from :mod:`k9bench.inference.settings`;
- :func:`config_from_argv`: the frozen :class:`~k9bench.inference.settings.RunConfig` of a command line
  (a bad value: :class:`k9bench.stage.StageError`, one line naming the flag, exit 2);
- :class:`InferenceStage`: outputs (the raw file, or this shard's file), fingerprint
  (:func:`k9bench.inference.resume_check.stage_fingerprint`), ``run()``.

``run()`` does everything that can refuse a run before a model loads first: the flags (in
:func:`config_from_argv`), the model path, the prompt file, the dataset and ``--split``, the earlier
records (made with other settings: refused, or set aside with ``redo_changed``), the ``--video_dir``
count (none of the videos there: exit 2), the model's ``config.json`` (``--max_new_tokens`` against its
context, ``--audio`` against its modalities). Then the backend loads and :class:`k9bench.inference.runner.Runner`
answers what is left, each record appended to ``<output>.partial.jsonl`` at once. When every question has a
record, the raw JSON is written atomically with the stage block, and the checkpoint removed.

Rerunning the same command skips what is there (failed records are retried unless ``--no_retry_failed``).
Signals, the output check and the lock are :func:`k9bench.stage.run_stage`'s: SIGTERM, SIGUSR1 and Ctrl-C
exit 75 with the checkpoint kept. ``--data_parallel N`` runs N shard workers and merges them
(:mod:`k9bench.inference.data_parallel`).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

from k9bench.artifacts import QuestionRecord, RecordsArtifact, now_iso
from k9bench.inference.backend import BackendError, BackendUnavailable, EngineDead, create_backend
from k9bench.inference.planning import (
    EXIT_BACKEND,
    UsageError,
    auto_download,
    check_model_config,
    check_model_path,
    check_split,
    check_videos,
    group_by_video,
    merged_output_path,
    output_path,
    preflight,
    shard_groups,
)
from k9bench.inference.outcome import all_failed_exit as _all_failed_exit
from k9bench.inference.records import RunContext, failure_counts, final_meta
from k9bench.inference.resume_check import expected, fingerprint, read_raw_records, record_fingerprint, shaped_like, stage_fingerprint
from k9bench.inference.runner import Runner
from k9bench.inference.settings import RunConfig, inapplicable_flags
from k9bench.resume import ResumableStage, ResumeRefused
from k9bench.stage import EXIT_USAGE, Interrupted, Stage, StageError, check_output, deferred

log = logging.getLogger("k9bench.inference")


def build_parser() -> argparse.ArgumentParser:
    """The flags of ``eval_video_llm.py``, generated from the settings classes of :mod:`k9bench.inference.settings`;
    each backend's flags from its :mod:`k9bench.inference.registry` row (those of a row whose group is
    :data:`~k9bench.inference.registry.MODEL_FLAGS_GROUP` before ``--backend``, the others' groups after it)."""
    from k9bench.cli import ArgumentParser, add_logging_args
    from k9bench.data.dataset import DatasetSettings
    from k9bench.inference.registry import MODEL_FLAGS_GROUP, REGISTRY
    from k9bench.inference.settings import (
        DataSettings,
        FrameSettings,
        GenerationSettings,
        ModelSettings,
        OutputSettings,
        PromptSettings,
        add_backend_arguments,
    )
    from k9bench.settings import add_arguments, default_of

    parser = ArgumentParser(
        prog="eval_video_llm.py",
        description="Run a video LLM on K9-Bench and write the raw results JSON (resumable, batched).",
    )
    model = parser.add_argument_group(MODEL_FLAGS_GROUP)
    add_arguments(model, ModelSettings, exclude=("backend",))
    for entry in REGISTRY.values():
        if entry.flag_group == MODEL_FLAGS_GROUP:
            add_backend_arguments(model, entry)
    add_arguments(model, ModelSettings, only=("backend",))
    groups: dict[str, argparse._ArgumentGroup] = {}
    for entry in REGISTRY.values():
        if entry.flag_group != MODEL_FLAGS_GROUP:
            if entry.flag_group not in groups:
                groups[entry.flag_group] = parser.add_argument_group(entry.flag_group)
            add_backend_arguments(groups[entry.flag_group], entry)

    data = parser.add_argument_group("data (reference flags)")
    add_arguments(data, DatasetSettings)  # --dataset_name, --split, --drop_invalid_rows: the flags every script shares
    add_arguments(data, DataSettings)

    add_arguments(parser.add_argument_group("video frames"), FrameSettings)

    gen = parser.add_argument_group("prompt and generation")
    add_arguments(gen, PromptSettings)
    add_arguments(gen, GenerationSettings)
    sampling = gen.add_mutually_exclusive_group()
    sampling.add_argument("--do_sample", dest="do_sample", action="store_true", default=default_of(GenerationSettings, "do_sample"),
                          help="sample (default: the model's generation config)")
    sampling.add_argument("--greedy", dest="do_sample", action="store_false", help="greedy decoding (default: the model's generation config)")

    add_arguments(parser.add_argument_group("output"), OutputSettings)
    add_logging_args(parser)
    return parser


def checked_config_from_namespace(args: argparse.Namespace) -> RunConfig:
    """The resolved config of parsed flags, checked (:func:`~k9bench.inference.planning.preflight`); raises
    :class:`StageError` (exit 2) naming the flag."""
    from k9bench.inference.settings import config_from_namespace, resolve

    config = resolve(config_from_namespace(args))
    try:
        preflight(config)
        check_split(config)
    except UsageError as exc:
        raise StageError(str(exc)) from None
    return config


def config_from_argv(argv: list[str]) -> RunConfig:
    """The run's config from a command line (argparse's own usage errors: ``SystemExit(2)``)."""
    return checked_config_from_namespace(build_parser().parse_args(list(argv)))


def main(argv: list[str] | None = None) -> int:
    """``eval_video_llm.py``: parse, set up logging, :func:`k9bench.stage.run_stage` of :class:`InferenceStage`."""
    from k9bench.logs import setup_logging
    from k9bench.stage import run_stage

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # a bad flag value (argparse printed one line) or --help
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    setup_logging(args.verbose, args.quiet)
    try:
        config = checked_config_from_namespace(args)
    except StageError as exc:
        log.error("%s", exc)
        return exc.exit_code
    return run_stage(InferenceStage(config, argv))


class InferenceStage(Stage):
    """One inference run (or one shard of it) as a stage; ``run()`` resumes from its checkpoint.

    ``redo_changed``: records made with other settings are set aside (the earlier raw file and checkpoint
    renamed ``*.replaced-<time>``) and redone, instead of refusing the run (exit 2, the default by hand)."""

    name = "inference"

    def __init__(self, config: RunConfig, argv: list[str] | None = None, *, redo_changed: bool = False):
        self.config = config
        self.argv = list(argv) if argv is not None else None
        self.redo_changed = redo_changed
        self._prompt: tuple[str, str] | None = None

    # -- the contract ----------------------------------------------------

    def outputs(self) -> list[Path]:
        """The raw file this process writes (with ``--data_parallel``: the merged file)."""
        return [merged_output_path(self.config) if self.config.data.data_parallel > 1 else output_path(self.config)]

    def inputs(self) -> list[Path]:
        return []  # the dataset and the videos are named by the settings; the videos used are listed by content in the file

    def system_prompt(self) -> tuple[str, str]:
        """(text, source) of the system prompt (raises :class:`StageError` for an unreadable file)."""
        if self._prompt is None:
            from k9bench.prompts import load_prompt

            try:
                self._prompt = load_prompt("system_prompt", self.config.prompt.system_prompt_file)
            except StageError as exc:  # k9bench.artifacts.ArtifactError: the message names the file
                raise StageError(f"--system_prompt_file {exc}") from None
        return self._prompt

    def fingerprint(self) -> dict:
        from k9bench.layout import short_model_name
        from k9bench.prompts import sha256

        try:
            prompt_sha = sha256(self.system_prompt()[0])
        except StageError:
            prompt_sha = None
        return stage_fingerprint(self.config, short_model_name(self.config.model.model_name_or_path), prompt_sha)

    def set_aside_if_changed(self) -> None:
        """Set this stage's output and checkpoint aside when made with other settings (with ``redo_changed``;
        :mod:`k9bench.inference.data_parallel` calls it for each shard before its workers start)."""
        _Run(self).prepare()

    def run(self) -> int:
        work = _Run(self)
        if not work.prepare():  # every selected question has a record in the finished file
            return work.nothing_to_do()
        if self.config.data.data_parallel > 1:  # the checks above ran once, before any worker starts
            from k9bench.inference.data_parallel import run_data_parallel

            return run_data_parallel(self)
        return work.answer_and_write()


class _Run:
    """One invocation of :meth:`InferenceStage.run` (the state the steps share)."""

    def __init__(self, stage: InferenceStage):
        self.stage = stage
        self.config = stage.config
        self.started = now_iso()
        self.download_summary: dict | None = None

    def prepare(self) -> bool:
        """Every check that needs no model, in order; False when there is nothing to do (the finished file holds
        a record for every selected question), else True. Raises :class:`StageError`."""
        from k9bench.data.dataset import DatasetError, load_questions, select_range
        from k9bench.layout import short_model_name
        from k9bench.prompts import sha256

        config, data, frames = self.config, self.config.data, self.config.frames
        self.output = output = self.stage.outputs()[0]
        # not the dataset file or the prompt file (named by the settings, not stage inputs: see InferenceStage.inputs)
        check_output(output, flag="--output_file", inputs=[data.dataset_name, config.prompt.system_prompt_file])
        if frames.frame_cache_dir and not frames.text_only:
            check_output(frames.frame_cache_dir, flag="--frame_cache_dir", folder=True)
        why = check_model_path(config)
        if why:
            raise StageError(why, EXIT_BACKEND)
        self.prompt = self.stage.system_prompt()
        try:
            self.loaded = load_questions(data.dataset_name, data.split, drop_invalid=data.drop_invalid_rows)
        except (DatasetError, FileNotFoundError) as exc:
            raise StageError(str(exc)) from None
        questions = self.loaded.questions
        if data.subset:  # only the subset's questions run (k9bench.data.subset); the range counts among them
            from k9bench.data.subset import SubsetError, read_subset, restrict

            try:
                chosen = read_subset(data.subset)
            except SubsetError as exc:
                raise StageError(str(exc)) from None
            questions = restrict(questions, chosen)
            log.info("--subset %s: %d of the dataset's %d questions (%s, sha256 %s)", data.subset, len(questions),
                     len(self.loaded.questions), chosen.description, chosen.sha256[:12])
        selection = select_range(questions, data.start_idx, data.end_idx, data.max_samples)
        if not selection:
            raise StageError(f"no question selected (--start_idx {data.start_idx}, --end_idx {data.end_idx}, "
                             f"--max_samples {data.max_samples} out of {len(questions)}" + (f" of --subset {data.subset}" if data.subset else "") + ")")
        self.order = {q.idx: n for n, q in enumerate(selection)}
        try:
            self.groups = shard_groups(group_by_video(selection, data.video_dir), data.num_shards, data.shard_id)
        except UsageError as exc:
            raise StageError(str(exc)) from None
        self.selected = selected = {q.idx: q for g in self.groups for q in g.questions}
        if data.num_shards > 1:
            log.info("shard %d of %d: %d video(s), %d question(s)", data.shard_id, data.num_shards, len(self.groups), len(selected))
        if len(selected) < sum(len(g.questions) for g in self.groups):
            raise StageError("the selection holds duplicate idx values; each question needs a unique idx")

        self.resumable = ResumableStage(output, read_final=read_raw_records)
        self.model_name = short_model_name(config.model.model_name_or_path)
        self.prompt_sha = sha256(self.prompt[0])
        # cheap checks of the resumable state and of the settings known before the model loads come first
        self.done = self._load_done(selected, expected(fingerprint(config, self.model_name, self.prompt_sha)))
        pending = self._pending()
        if data.auto_download and not frames.text_only and pending:
            from k9bench.download.stage import DownloadInputError

            try:
                self.download_summary = auto_download(pending, config)
            except DownloadInputError as exc:
                raise StageError(f"--auto_download: {exc}") from None
        try:
            check_videos(config, pending, self.groups)  # the folder judged by the whole run's videos (a resume)
            check_model_config(config)
        except UsageError as exc:
            raise StageError(str(exc)) from None
        return bool(pending) or not output.exists() or self.resumable.checkpoint.exists()

    # -- resume ----------------------------------------------------------

    def _load_done(self, selected: dict, want: dict) -> dict:
        if self.stage.redo_changed and self._made_otherwise():
            self._set_aside()
        try:
            done = self.resumable.load(selected=selected, retry_failed=not self.config.output.no_retry_failed)
            self.resumable.check(done, want, fingerprint_of=lambda r: shaped_like(record_fingerprint(r), want))
            return done
        except ResumeRefused as exc:
            if not self.stage.redo_changed:
                raise StageError(f"{exc}; rerun with the flags that produced it (its records keep generation, seed, "
                                 "attn_implementation and run_settings), or use another --output_file") from None
        self._set_aside()
        return {}

    def _made_otherwise(self) -> str | None:
        """What differs between the finished file's stage block and this run, leaving out which positions are
        selected (a longer or shorter range, another --subset, reuses the records); None when nothing or no block is there."""
        from k9bench.settings import fingerprint_differences

        block = self.stage.recorded() if self.resumable.final.exists() else None
        if block is None:
            return None
        diffs = [d for d in fingerprint_differences(block.get("fingerprint") or {}, self.stage.fingerprint())
                 if not d.startswith(("data.start_idx:", "data.end_idx:", "data.max_samples:", "data.subset_sha256:"))]
        if diffs:
            log.info("%s was made with other settings: %s", self.resumable.final, "; ".join(diffs))
        return "; ".join(diffs) or None

    def _set_aside(self) -> None:
        """``redo_changed``: move the earlier raw file and checkpoint aside (renamed, never deleted) and start over."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        self.resumable.close()
        for path in (self.resumable.final, self.resumable.checkpoint):
            if path.exists():
                aside = path.with_name(f"{path.name}.replaced-{stamp}")
                path.rename(aside)
                log.warning("%s was made with other settings: moved to %s, its questions are redone", path, aside)
        self.resumable = ResumableStage(self.resumable.final, read_final=read_raw_records)

    def _pending(self) -> list:
        return [g for g in self.groups if any(q.idx not in self.done for q in g.questions)]

    def nothing_to_do(self) -> int:
        output = self.output
        log.info("%s already holds a record for every selected question; nothing to do", output)
        why = self.stage.done()
        if why is not None:  # written before the stage block, or by flags that change no record
            from k9bench.artifact_io import read_json, write_json_atomic

            data = read_json(output)
            held = {r.get("idx") for r in data.get("individual_results") or [] if isinstance(r, dict)}
            if held != set(self.selected):  # the file holds other questions too: its block stays true to it
                log.info("%s holds %d question(s) beyond this selection; left as it is (%s)", output,
                         len(held - set(self.selected)), why)
                return _all_failed_exit(list(self.done.values()), output)
            data["stage"] = self.stage.stage_block()
            with deferred():
                write_json_atomic(output, data)
        return _all_failed_exit(list(self.done.values()), output)

    # -- the model -------------------------------------------------------

    def answer_and_write(self) -> int:
        """Load the backend, answer what is left, write the raw file; the exit code."""
        config, frames, output = self.config, self.config.frames, self.output
        pending = self._pending()
        backend = frame_cache = None
        describe: dict | None = None
        patch = None
        runner: Runner | None = None
        ignored = inapplicable_flags(config)
        if ignored:  # said here, recorded as inference.ignored_flags
            log.warning("%s", ignored)
        try:
            try:
                backend = create_backend(config)
                backend.load()
            except BackendError as exc:
                raise StageError(str(exc), EXIT_BACKEND) from None
            describe = backend.describe()  # live (usage counters); masked when written
            from k9bench.video.sampling import DEFAULT_IMAGE_PATCH_SIZE

            patch = None if frames.text_only else (backend.frame_patch_size() or DEFAULT_IMAGE_PATCH_SIZE)
            sampling, frame_cache = self._frames(backend, patch, pending)
            fp = fingerprint(config, self.model_name, self.prompt_sha, describe, patch)
            try:
                self.resumable.check(self.done, expected(fp), fingerprint_of=record_fingerprint)
            except ResumeRefused as exc:
                if not self.stage.redo_changed:
                    raise StageError(f"{exc}; rerun with the flags that produced it, or use another --output_file") from None
                self._set_aside()
                self.done = {}
                pending = self._pending()
            ctx = RunContext(model_name=self.model_name, max_frames=frames.max_frames, system_prompt=self.prompt[0],
                             use_system_message=config.prompt.use_system_message, seed=config.generation.seed,
                             generation=fp["generation"], attn_implementation=fp["attn_implementation"],
                             text_only=frames.text_only, settings=fp["run_settings"], placement=config.prompt.placement)
            runner = Runner(config, backend, ctx, sampling)
            runner.stats.resumed = len(self.done)
            runner.done = self.done
            if pending:
                runner.run(pending, self.done, self.resumable, frame_cache)
            else:
                log.info("every selected question already has a record in %s; writing the final file", self.resumable.checkpoint)
        except Interrupted:
            log.warning("%d record(s) are safe in %s", len(self.done), self.resumable.checkpoint)
            raise
        except BackendUnavailable as exc:  # an engine that died (EngineDead) too: no question is tried against it again
            then = "once the backend is back" if not isinstance(exc, EngineDead) else "to resume once its cause is mended"
            raise StageError(f"{exc}; {len(self.done)} record(s) are safe in {self.resumable.checkpoint}: rerun the same "
                             f"command {then}", EXIT_BACKEND) from None
        except BackendError as exc:  # refused by the backend during the run (--audio: it takes no soundtrack)
            raise StageError(f"{exc}; {len(self.done)} record(s) are safe in {self.resumable.checkpoint}", EXIT_BACKEND) from None
        finally:
            self.resumable.close()
            if backend is not None:
                backend.close()
        return self._write(output, runner, describe, patch, frame_cache)

    def _frames(self, backend: Any, patch: int | None, pending: list) -> tuple[Any, Any]:
        """The sampling settings and the frame cache (None, None in text-only mode or with nothing to run)."""
        frames = self.config.frames
        if frames.text_only or not pending:
            return None, None
        from k9bench.video.cache import FrameCache, SamplingSettings
        from k9bench.video.sampling import DecoderUnavailable, default_min_pixels

        floor = frames.min_pixels or default_min_pixels(patch)
        if frames.max_pixels is not None and frames.max_pixels < floor:
            raise StageError(f"--max_pixels {frames.max_pixels} is below the per-frame minimum {floor} (--min_pixels, or qwen-vl-utils' "
                             f"default for patch size {patch}); raise --max_pixels or lower --min_pixels")
        overrides = backend.sampling_overrides() or {}  # the backend's own win (Gemini: a few frames check each file)
        sampling = SamplingSettings(**{**dict(fps=frames.fps, max_frames=frames.max_frames, max_pixels=frames.max_pixels,
                                               min_pixels=frames.min_pixels, image_patch_size=patch, decoder=frames.video_decoder),
                                       **overrides})
        try:
            return sampling, FrameCache(sampling, disk_dir=frames.frame_cache_dir)
        except DecoderUnavailable as exc:
            raise StageError(str(exc)) from None

    # -- the file --------------------------------------------------------

    def _write(self, output: Path, runner: Runner, describe: dict | None, patch: int | None, frame_cache: Any) -> int:
        resumable = self.resumable
        records = [QuestionRecord.from_dict(self.done[q.idx], where=f"{resumable.where}: idx {q.idx}") for g in self.groups for q in g.questions]
        records.sort(key=lambda r: self.order[r.idx])
        meta = final_meta(self.config, self.stage.argv, records=records, model_name=self.model_name, describe=describe,
                          image_patch_size=patch, prompt=self.prompt, loaded=self.loaded, stats=runner.stats, started=self.started,
                          frame_cache=frame_cache, download_summary=self.download_summary)
        meta["run_stats"]["checkpoint_rejected_lines"] = resumable.rejected
        meta["stage"] = self.stage.stage_block()
        with deferred():  # the final write and the checkpoint's removal are not cut by a signal
            resumable.finish(RecordsArtifact(records, meta).to_dict())
        failures = failure_counts(records)
        log.info("wrote %s: %d record(s), %d failed%s", output, len(records), meta["failed_count"],
                 f" ({', '.join(f'{k}: {v}' for k, v in sorted(failures.items()))})" if failures else "")
        return _all_failed_exit([r.to_dict() for r in records], output)


__all__ = ["InferenceStage", "build_parser", "checked_config_from_namespace", "config_from_argv", "main"]
