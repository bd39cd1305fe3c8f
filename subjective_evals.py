"""Score free-form answers with an LLM judge (GPT-4o by default): five axes, 1-10 each.

Reads any raw, sim or eval file from eval_video_llm.py / evaluate_results.py (ground truth
comes from the records themselves), asks the judge about each answered question, and
writes the judge list (idx order), a skipped list, a ``.meta.json`` provenance sidecar and
a ``.summary.json`` with per-axis means (1-10 and 0-100, the paper's Table 3 order).
Results are checkpointed as they arrive: rerunning the same command skips what is done
and retries what was skipped. The API key is read from ``OPENAI_API_KEY`` only.

Examples::

    export OPENAI_API_KEY=...
    python subjective_evals.py --evaluations eval_results/eval_Qwen3-VL-4B-Instruct_mf32_n-1.json \\
        --output eval_results/judge_Qwen3-VL-4B-Instruct.json --skipped eval_results/judge_skipped.json

    # pin a dated snapshot, more requests in flight, first 50 questions only
    python subjective_evals.py --evaluations eval.json --judge_model gpt-4o-2024-08-06 --concurrency 16 --limit 50

    # a self-hosted OpenAI-compatible judge (vLLM/SGLang); no key needed
    python subjective_evals.py --evaluations eval.json --base_url http://localhost:8000/v1 --judge_model Qwen/Qwen3-32B

    # cross-check the records against the dataset
    python subjective_evals.py --evaluations eval.json --dataset_name ogmen/K9Bench

The defaults are the reference's: only ``model`` and ``messages`` are sent (no temperature unless
``--temperature`` is given); each score is read by ``int()`` (``"9"`` -> 9, ``7.5`` -> 7, 11 kept as
given), every such score flagged in the entry (``score_adjustments``); ``--strict_scores`` skips an
entry whose score is out of 1-10. Keys are matched exactly (``'logic'`` skips the entry); extra keys
are kept. With ``--dataset_name``, questions of the dataset that have no record in the file are
listed in the skipped file as ``missing_model_answer``.

Every flag, the input and both output locations are checked before the first request: a bad
value is one line naming it, exit 2, nothing written. Secrets (the key in use, a key inside
``--base_url http://user:KEY@host``) are masked in every file and log line.

Exit status: 0 done, skipped entries included (their count is the last line; rerun to retry
them; ``--fail_on_skipped`` makes that exit 1); 2 bad input, prompt or missing key, an output that
cannot be written or is being written by another run, earlier files made with other settings or
from another evaluations file, or an endpoint that does not answer (probed before the first
question); 75 stopped by SIGTERM, SIGUSR1 or Ctrl-C (the checkpoint is kept: rerun to finish).
"""

from __future__ import annotations


def build_parser():
    from k9bench.judge import build_parser as judge_parser

    return judge_parser()


def main(argv: list[str] | None = None) -> int:
    import sys

    from k9bench.logs import setup_logging
    from k9bench.judge import JudgeStage, config_from_argv
    from k9bench.stage import StageError, run_stage

    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)  # argparse's own errors: exit 2
    setup_logging(args.verbose, args.quiet)
    try:
        stage = JudgeStage(config_from_argv(argv))
    except StageError as exc:
        import logging

        logging.getLogger("subjective_evals").error("%s", exc)
        return exc.exit_code
    return run_stage(stage)


if __name__ == "__main__":
    raise SystemExit(main())
