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

Exit status: 0 all selected questions scored; 1 some were skipped (files are written; rerun
to retry them); 2 bad input, prompt or missing key, or an endpoint that refuses every connection
(the run stops after that many failures in a row, checkpoint kept); 130 interrupted (rerun to finish).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
from pathlib import Path

from k9bench.cli import add_logging_args, setup_logging
from k9bench.progress import progress_enabled

log = logging.getLogger("subjective_evals")


def _positive_int(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return n


def _non_negative_int(value: str) -> int:
    n = int(value)
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return n


def _positive_float(value: str) -> float:
    x = float(value)
    if not x > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value}")
    return x


def _temperature(value: str) -> float | None:
    if value.strip().lower() in ("none", "default"):
        return None
    x = float(value)
    if not 0 <= x <= 2:
        raise argparse.ArgumentTypeError(f"expected a temperature in 0-2 (or 'none' for the API default), got {value}")
    return x


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="LLM-as-judge scoring of K9-Bench answers (Logic, Factuality, Accuracy, Conciseness, Overall; 1-10).",
    )
    p.add_argument("--evaluations", required=True, help="raw, sim or eval JSON file (individual_results, or the older threshold_results layout)")
    p.add_argument("--output", default=None, help="judge JSON list (default: judge_<name>.json beside --evaluations)")
    p.add_argument("--skipped", default=None, help="skipped entries JSON list (default: <output stem>_skipped.json)")
    g = p.add_argument_group("judge")
    g.add_argument("--judge_model", default="gpt-4o", help="judge model id (default: %(default)s); pin a dated snapshot (e.g. gpt-4o-2024-08-06) for comparable numbers")
    g.add_argument("--base_url", default=None, help="OpenAI-compatible endpoint (vLLM, SGLang, Azure, a proxy); default: the OpenAI API")
    g.add_argument("--temperature", type=_temperature, default=0.0, help="judge sampling temperature (default: %(default)s; 'none': the API's own default)")
    g.add_argument("--max_tokens", type=_positive_int, default=None, help="limit on the judge's reply length (default: the API's)")
    g.add_argument("--prompt_file", default=None, help="judge prompt template used verbatim instead of ours ({question}, {correct_answer}, {model_output})")
    r = p.add_argument_group("requests")
    r.add_argument("--concurrency", type=_positive_int, default=8, help="requests in flight at once (default: %(default)s)")
    r.add_argument("--max_retries", type=_non_negative_int, default=5, help="retries per request on 429, 5xx, timeouts and connection errors (default: %(default)s)")
    r.add_argument("--timeout", type=_positive_float, default=120.0, help="seconds per request attempt (default: %(default)s)")
    r.add_argument("--retry_backoff", type=_positive_float, default=1.0, help="seconds before the first retry, doubled each time, with jitter (default: %(default)s)")
    r.add_argument("--retry_backoff_max", type=_positive_float, default=60.0, help="ceiling of the retry backoff in seconds (default: %(default)s)")
    s = p.add_argument_group("selection and checks")
    s.add_argument("--limit", type=_non_negative_int, default=None, help="judge only the first N answered questions (idx order)")
    s.add_argument("--dataset_name", default=None, help="cross-check the records against this dataset (Hub id, local file, or 'demo') and report mismatches")
    s.add_argument("--split", default="test", help="dataset split for --dataset_name (default: %(default)s)")
    add_logging_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose, args.quiet)

    from k9bench.artifacts import provenance
    from k9bench.judge import (
        JudgeInputError,
        JudgeSettings,
        RunPaths,
        build_tasks,
        check_prompt_template,
        cross_check,
        default_output,
        default_skipped,
        format_summary,
        run_judge,
    )
    from k9bench.openai_api import ChatClient, MissingApiKey, RetryPolicy, resolve_api_key
    from k9bench.prompts import load_prompt

    # The key first: nothing is read or written before we know we can call the judge.
    try:
        api_key = resolve_api_key(args.base_url)
    except MissingApiKey as exc:
        log.error("%s", exc)
        return 2

    output = args.output or str(default_output(args.evaluations))
    skipped = args.skipped or str(default_skipped(output))
    paths = RunPaths(output=Path(output), skipped=Path(skipped))
    if paths.output.resolve() == paths.skipped.resolve():
        log.error("--output and --skipped are the same file (%s)", output)
        return 2
    for flag, path in (("--output", paths.output), ("--skipped", paths.skipped)):
        if path.is_dir():  # found now, not after every request was paid for
            log.error("%s %s is a folder; give a file name", flag, path)
            return 2

    try:
        template, prompt_source = load_prompt("judge_prompt", args.prompt_file)
        check_prompt_template(template, prompt_source)
        if prompt_source != "builtin:judge_prompt":
            log.info("judge prompt replaced verbatim by %s", prompt_source)
        taskset = build_tasks(args.evaluations)
    except (JudgeInputError, FileNotFoundError) as exc:
        log.error("%s", exc)
        return 2
    log.info("%s: %s file, %d record(s), %d answered", args.evaluations, taskset.stage, taskset.total_records, len(taskset.tasks))

    dataset_check = None
    if args.dataset_name:
        from k9bench.dataset import DatasetError, load_questions

        try:
            loaded = load_questions(args.dataset_name, args.split)
        except DatasetError as exc:
            log.error("--dataset_name %s: %s", args.dataset_name, exc)
            return 2
        mismatches = cross_check(taskset.tasks, loaded.questions)
        dataset_check = {"dataset": args.dataset_name, "split": args.split, "mismatches": mismatches}
        if mismatches:
            log.warning("%d mismatch(es) between %s and %s (the records' own ground truth is used):", len(mismatches), args.evaluations, args.dataset_name)
            for m in mismatches[:20]:
                log.warning("  idx %s: %s: record %r, dataset %r", m["idx"], m["field"], m["record"], m["dataset"])
        else:
            log.info("records agree with %s (%d questions checked)", args.dataset_name, len(taskset.tasks))

    settings = JudgeSettings(
        model=args.judge_model,
        template=template,
        prompt_source=prompt_source,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
    )
    retry = RetryPolicy(max_retries=args.max_retries, backoff_base=args.retry_backoff, backoff_max=args.retry_backoff_max)

    def make_client() -> ChatClient:
        client = ChatClient(api_key=api_key, base_url=args.base_url, timeout=args.timeout, retry=retry)
        log.info("judge %s at %s, %d request(s) in flight, up to %d retries", args.judge_model, client.base_url, args.concurrency, args.max_retries)
        return client

    meta = {
        "provenance": provenance("subjective_evals.py", argv, args),
        "input": {
            "evaluations": str(args.evaluations),
            "sha256": hashlib.sha256(Path(args.evaluations).read_bytes()).hexdigest(),
            "stage": taskset.stage,
            "records": taskset.total_records,
        },
        "judge": {"base_url": args.base_url, "concurrency": args.concurrency, "timeout": args.timeout, "max_retries": args.max_retries},
    }
    if dataset_check is not None:
        meta["dataset_check"] = dataset_check
    try:
        result = run_judge(
            taskset=taskset,
            settings=settings,
            paths=paths,
            make_client=make_client,
            concurrency=args.concurrency,
            limit=args.limit,
            meta=meta,
            progress_disable=progress_enabled(),
        )
    except JudgeInputError as exc:
        log.error("%s", exc)
        return 2
    if result.interrupted:
        return 130
    if result.unreachable:
        return 2
    print(format_summary(result.summary))
    log.info("wrote %s (%d scored), %s (%d skipped), %s", paths.output, len(result.entries), paths.skipped, len(result.skipped), paths.summary)
    if result.skipped:
        log.warning("%d entr%s skipped (see %s); rerun the same command to retry", len(result.skipped), "y" if len(result.skipped) == 1 else "ies", paths.skipped)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
