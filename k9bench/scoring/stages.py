"""The scoring stages behind ``evaluate_results.py``: the parser, the config, and the two
:class:`k9bench.stage.Stage` implementations.

- :class:`CalculateStage` (raw -> sim): input the raw file (and the ``--subset`` file) by content;
  fingerprint the embedding model and dtype; the stage block goes into the sim file (``"stage"``).
- :class:`EvaluateStage` (sim -> eval): input the sim file (and the subset file) by content;
  fingerprint the threshold and the statistics' settings; the stage block goes into the eval file.

Every record is checked before the embedding model loads; a bad input file is one line naming the
file and record idx, exit 1 (the script's documented data exit); a bad flag value or an output that
cannot be written, exit 2, before anything is read. ``--mode all`` checks both outputs, then runs the
two stages in turn.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from k9bench.artifacts import RecordsArtifact, provenance
from k9bench.artifact_io import ArtifactError, write_json_atomic
from k9bench.headers.files import NewerSchema
from k9bench.scoring.settings import EmbeddingSettings, EvalSettings, ScoringConfig, ScoringError, ScoringFiles
from k9bench.settings import add_arguments, from_namespace, result_fingerprint, to_dict
from k9bench.stage import EXIT_OK, EXIT_USAGE, Stage, StageError, check_output, deferred, run_stage

log = logging.getLogger("evaluate_results")

SCRIPT = "evaluate_results.py"


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``evaluate_results.py`` (generated from the settings dataclasses)."""
    from k9bench.cli import ArgumentParser, add_logging_args
    from k9bench.report import add_report_args

    class Parser(ArgumentParser):
        """Errors on one line (no usage block): ``evaluate_results.py: error: <what> (see --help)``."""

        def error(self, message: str):  # noqa: D102 (argparse's)
            self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    parser = Parser(prog=SCRIPT, formatter_class=argparse.RawDescriptionHelpFormatter,
                    description="Embedding-similarity scoring of K9-Bench answers (calculate -> sim JSON, evaluate -> eval JSON).")
    add_arguments(parser, ScoringFiles, only=("mode", "input_file", "output_file"))
    add_arguments(parser, EvalSettings, only=("threshold",))
    add_arguments(parser, ScoringFiles, only=("subset",))
    emb = parser.add_argument_group("embedding (calculate, all)")
    add_arguments(emb, EmbeddingSettings)
    add_arguments(emb, ScoringFiles, only=("sim_file",))
    st = parser.add_argument_group("statistics (evaluate, all)")
    add_arguments(st, EvalSettings, exclude=("threshold",))
    add_report_args(parser)
    add_logging_args(parser)
    return parser


def config_from_argv(argv: list[str] | None) -> ScoringConfig:
    """Parse and check ``argv``; :class:`StageError` (exit 2, one line naming the flag) for a bad value,
    ``SystemExit(2)`` for argparse's own usage errors."""
    return config_from_namespace(build_parser().parse_args(argv), tuple(sys.argv[1:] if argv is None else argv))


def config_from_namespace(args: argparse.Namespace, argv: Sequence[str] = ()) -> ScoringConfig:
    """The one step from parsed flags to the frozen :class:`ScoringConfig` (``argv``: the command line it came from,
    kept as the record); the same checks and errors as :func:`config_from_argv`."""
    try:
        files = from_namespace(ScoringFiles, args)
        emb = from_namespace(EmbeddingSettings, args)
        ev = from_namespace(EvalSettings, args)
        report = None
        if files.mode == "report":
            from k9bench.report import ReportSettings

            report = from_namespace(ReportSettings, args)
    except ValueError as exc:
        raise StageError(str(exc), EXIT_USAGE) from None
    if files.mode != "report" and len(files.input_file) != 1:
        raise StageError(f"--mode {files.mode} takes exactly one --input_file (got {len(files.input_file)})", EXIT_USAGE)
    # verbose and quiet come from the namespace too (ScoringConfig's own fields)
    return from_namespace(ScoringConfig, args, files=files, embedding=emb, evaluation=ev, argv=tuple(argv), report=report)


# ---------------------------------------------------------------------------
# Outputs


def default_output_path(input_path: str | Path, stage: str) -> Path:
    """``raw_X.json`` -> ``sim_X.json`` / ``eval_X.json`` beside it (:func:`k9bench.layout.next_stage_path`)."""
    from k9bench.layout import next_stage_path

    return next_stage_path(input_path, stage)


def output_paths(files: ScoringFiles) -> tuple[Path | None, Path | None]:
    """(sim output, eval output) for ``files.mode``; :class:`StageError` (exit 2) when one would be the
    input or both are the same file."""
    input_path = Path(files.input_file[0])
    sim_out = eval_out = None
    if files.mode == "calculate":
        sim_out = Path(files.output_file) if files.output_file else default_output_path(input_path, "sim")
    elif files.mode == "evaluate":
        eval_out = Path(files.output_file) if files.output_file else default_output_path(input_path, "eval")
    else:  # all
        eval_out = Path(files.output_file) if files.output_file else default_output_path(input_path, "eval")
        if files.sim_file:
            sim_out = Path(files.sim_file)
        elif files.output_file and eval_out.name.startswith("eval_"):
            sim_out = eval_out.with_name("sim_" + eval_out.name[len("eval_"):])
        elif files.output_file:
            sim_out = eval_out.with_name(f"{eval_out.stem}.sim{eval_out.suffix or '.json'}")
        else:
            sim_out = default_output_path(input_path, "sim")
    for out in (sim_out, eval_out):
        if out is not None and _same_path(out, input_path):
            raise StageError(f"{out}: the output would overwrite the input file; pass another --output_file", EXIT_USAGE)
    if sim_out is not None and eval_out is not None and _same_path(sim_out, eval_out):
        raise StageError(f"{sim_out}: the sim and eval outputs are the same file; pass --sim_file", EXIT_USAGE)
    return sim_out, eval_out


def _same_path(a: Path, b: Path) -> bool:
    """The same file once links are followed (a symlink loop is no error here: the reader names it)."""
    return os.path.realpath(a) == os.path.realpath(b)


def _sim_flag(files: ScoringFiles) -> str:
    return "--sim_file" if files.mode == "all" and files.sim_file else "--output_file"


# ---------------------------------------------------------------------------
# The stages


class _ScoringStage(Stage):
    """What both stages share: the input file, the subset, provenance, the final write."""

    def __init__(self, config: ScoringConfig, source: Path):
        self.config = config
        self.source = source
        self.sim_out, self.eval_out = output_paths(config.files)

    def inputs(self) -> list[Path]:
        """The input file and the ``--subset`` file, those that exist (a missing one is run()'s one-line error,
        not a traceback while the launcher plans)."""
        subset = self.config.files.subset
        return [p for p in (self.source, *([Path(subset)] if subset else [])) if p.is_file()]

    def _fingerprint(self, *settings: Any, **more: Any) -> dict:
        return {"stage": self.name, **result_fingerprint(*settings), **more}

    def _provenance(self, *settings: Any) -> dict:
        values: dict = {}
        for obj in (self.config.files, *settings):
            values.update({k: list(v) if isinstance(v, tuple) else v for k, v in to_dict(obj).items()})
        return provenance(SCRIPT, list(self.config.argv), values)

    def _load(self) -> tuple[RecordsArtifact, list[dict], dict]:
        """The input's records (restricted to the subset) and the meta keys that say so; every fault of the
        file is one line naming it (exit 1), a bad ``--subset`` file exit 2."""
        from k9bench.scoring.rule import load_for_scoring

        chosen = None
        if self.config.files.subset:
            from k9bench.data.subset import read_subset

            chosen = read_subset(self.config.files.subset)
        try:
            artifact, rows = load_for_scoring(self.source)
        except NewerSchema:
            raise  # exit 2: this code is older than the file
        except ArtifactError as exc:
            raise ScoringError(str(exc)) from None
        header = artifact.header  # the typed header (k9bench.headers): its kind and the stage that wrote it
        log.info("%s: %d records (%s file, %s)", self.source, len(artifact.records), header.KIND,
                 f"written by {header.stage}, header version {header.schema_version}" if header.stage else "no stage named: the reference's layout")
        extra: dict = {}
        if chosen is not None:
            keep = [i for i, r in enumerate(artifact.records) if r.idx in chosen.idx]
            if not keep:
                raise StageError(f"--subset {chosen.source}: none of the {len(artifact.records)} records of {self.source} "
                                 "is in the subset", EXIT_USAGE)
            dropped = len(artifact.records) - len(keep)
            artifact = RecordsArtifact(records=[artifact.records[i] for i in keep], meta=artifact.meta, path=artifact.path)
            rows = [rows[i] for i in keep]
            extra["subset"] = {**chosen.summary(), "kept": len(keep), "dropped": dropped,
                               "absent": len(chosen.idx - {r.idx for r in artifact.records})}
            log.info("--subset %s: %d of %d records kept (%s)", chosen.source, len(keep), len(keep) + dropped, chosen.description)
        return artifact, rows, extra

    def _write(self, path: Path, artifact: RecordsArtifact) -> None:
        artifact.meta["stage"] = self.stage_block()
        with deferred():  # a stop signal waits until the file is whole
            write_json_atomic(path, artifact.to_dict())
        log.info("wrote %s", path)


class CalculateStage(_ScoringStage):
    """raw -> sim (see the module doc)."""

    name = "calculate"

    def __init__(self, config: ScoringConfig):
        super().__init__(config, Path(config.files.input_file[0]))

    def outputs(self) -> list[Path]:
        return [self.sim_out]

    def output_flags(self) -> list[str]:
        return [_sim_flag(self.config.files)]

    def fingerprint(self) -> dict:
        return self._fingerprint(self.config.embedding)

    def run(self) -> int:
        from k9bench.scoring import embedding
        from k9bench.scoring.calculate import calculate, plan_calculation

        artifact, rows, extra = self._load()
        plan = plan_calculation(artifact.records, self.source, rows)  # every record checked before a model loads
        model, run = embedding.load_embedding_model(self.config.embedding)
        log.info("embedding on %s, %s (%s), attention %s, answers with prompt %s", run.device, run.dtype, run.dtype_reason,
                 run.attention or "default", run.query_prompt_name or "none")
        sim = calculate(artifact, model, run, path=self.source, provenance=self._provenance(self.config.embedding), plan=plan,
                        extra_meta=extra)
        self._write(self.sim_out, sim)
        return EXIT_OK


class EvaluateStage(_ScoringStage):
    """sim -> eval (see the module doc). In ``--mode all`` its input is the sim file calculate wrote."""

    name = "evaluate"

    def __init__(self, config: ScoringConfig):
        sim_out, _ = output_paths(config.files)
        source = sim_out if config.files.mode == "all" else Path(config.files.input_file[0])
        super().__init__(config, source)

    def outputs(self) -> list[Path]:
        return [self.eval_out]

    def fingerprint(self) -> dict:
        ev = self.config.evaluation
        return self._fingerprint(ev, bootstrap_resamples=ev.bootstrap_resamples, seed=ev.seed,
                                 sensitivity_thresholds=list(ev.sensitivity_thresholds))

    def run(self) -> int:
        from k9bench.scoring.evaluate import evaluate, format_table

        artifact, rows, extra = self._load()
        result = evaluate(artifact, self.config.evaluation, path=self.source, raw_rows=rows,
                          provenance=self._provenance(self.config.evaluation), extra_meta=extra)
        self._write(self.eval_out, result)
        print(format_table(result.meta, title=str(self.eval_out)), flush=True)
        return EXIT_OK


# ---------------------------------------------------------------------------
# The script's run


def run_scoring(config: ScoringConfig) -> int:
    """``evaluate_results.py`` after parsing: the mode's stage(s) through :func:`k9bench.stage.run_stage`."""
    mode = config.files.mode
    try:
        if mode == "report":
            from k9bench.report import ReportStage

            return run_stage(ReportStage(config.report))
        stages: list[Stage] = []
        if mode in ("calculate", "all"):
            stages.append(CalculateStage(config))
        if mode in ("evaluate", "all"):
            stages.append(EvaluateStage(config))
        # every output checked before anything is read or loaded: in --mode all a bad eval output would
        # otherwise show only after the whole embedding pass
        for stage in reversed(stages):  # the eval output first: in --mode all it is the one the user named
            for out, flag in zip(stage.outputs(), stage.output_flags()):
                check_output(out, flag=flag, inputs=[Path(config.files.input_file[0])])
    except StageError as exc:
        log.error("%s", exc)
        return exc.exit_code
    for stage in stages:
        code = run_stage(stage)
        if code != EXIT_OK:
            return code
    return EXIT_OK


__all__ = ["CalculateStage", "EvaluateStage", "SCRIPT", "build_parser", "config_from_argv", "default_output_path",
           "output_paths", "run_scoring"]
