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

Scores are read as the reference reads them where the meaning is clear: ``"9"`` counts as 9 and
``7.5`` is truncated to 7, both flagged in the entry (``score_adjustments``); a score outside 1-10
is never kept (the entry is skipped with the reason). With ``--dataset_name``, questions of the
dataset that have no record in the file are listed in the skipped file as ``missing_model_answer``.

Every flag, the input and both output locations are checked before the first request: a bad
value is one line naming it, exit 2, nothing written. Secrets (the key in use, a key inside
``--base_url http://user:KEY@host``) are masked in every file and log line.

Exit status: 0 all selected questions scored; 1 some were skipped (files are written; rerun
to retry them; questions with no answer in the file do not count); 2 bad input, prompt or
missing key, an output that cannot be written, or an endpoint that refuses every connection
(the run stops after that many failures in a row, checkpoint kept); 130 interrupted (rerun to finish).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from k9bench.cli import ArgumentParser, add_logging_args, setup_logging
from k9bench.judge import JudgeRunSettings, JudgeSettings, RequestSettings
from k9bench.progress import progress_enabled
from k9bench.settings import add_arguments, from_namespace, to_dict

log = logging.getLogger("subjective_evals")


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        description="LLM-as-judge scoring of K9-Bench answers (Logic, Factuality, Accuracy, Conciseness, Overall; 1-10).",
    )
    add_arguments(p, JudgeRunSettings, only=("evaluations", "output", "skipped"))
    g = p.add_argument_group("judge")
    add_arguments(g, JudgeSettings, only=("judge_model",))
    add_arguments(g, RequestSettings, only=("base_url",))
    add_arguments(g, JudgeSettings, exclude=("judge_model",))
    add_arguments(p.add_argument_group("requests"), RequestSettings, exclude=("base_url",))
    add_arguments(p.add_argument_group("selection and checks"), JudgeRunSettings, only=("limit", "dataset_name", "split"))
    add_logging_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose, args.quiet)

    from k9bench.artifacts import provenance
    from k9bench.judge import (
        JudgeConfig,
        JudgeInputError,
        build_tasks,
        check_prompt_template,
        cross_check,
        format_summary,
        resolve_paths,
        run_judge,
        with_missing_answers,
    )
    from k9bench.openai_api import ChatClient, MissingApiKey, resolve_api_key
    from k9bench.prompts import load_prompt
    from k9bench.redact import install_log_filter, register_secret, register_url_secrets

    install_log_filter()
    requests = from_namespace(RequestSettings, args)
    run = from_namespace(JudgeRunSettings, args)
    register_url_secrets(requests.base_url)  # a key inside http://user:KEY@host is masked everywhere

    # The key first: nothing is read or written before we know we can call the judge.
    try:
        api_key = resolve_api_key(requests.base_url)
    except MissingApiKey as exc:
        log.error("%s", exc)
        return 2
    register_secret(api_key)

    try:
        paths = resolve_paths(run)  # every output location, before any request is paid for
        template, prompt_source = load_prompt("judge_prompt", args.prompt_file)
        check_prompt_template(template, prompt_source)
        if prompt_source != "builtin:judge_prompt":
            log.info("judge prompt replaced verbatim by %s", prompt_source)
        taskset = build_tasks(run.evaluations)
        input_sha256 = hashlib.sha256(Path(run.evaluations).read_bytes()).hexdigest()
    except (JudgeInputError, FileNotFoundError) as exc:
        log.error("%s", exc)
        return 2
    except UnicodeDecodeError as exc:
        log.error("--prompt_file %s: not UTF-8 text (%s at byte %d)", args.prompt_file, exc.reason, exc.start)
        return 2
    except OSError as exc:
        log.error("cannot read %s: %s", exc.filename or run.evaluations, exc.strerror or exc)
        return 2
    judge = from_namespace(JudgeSettings, args, template=template, prompt_source=prompt_source)
    config = JudgeConfig(judge=judge, requests=requests, run=run)
    log.info("%s: %s file, %d record(s), %d answered", run.evaluations, taskset.stage, taskset.total_records, len(taskset.tasks))

    dataset_check = None
    if run.dataset_name:
        from k9bench.dataset import DatasetError, load_questions

        try:
            loaded = load_questions(run.dataset_name, run.split)
        except DatasetError as exc:
            log.error("--dataset_name %s: %s", run.dataset_name, exc)
            return 2
        mismatches = cross_check(taskset.tasks, loaded.questions)
        taskset = with_missing_answers(taskset, loaded.questions)
        dataset_check = {"dataset": run.dataset_name, "split": run.split, "mismatches": mismatches,
                         "missing_model_answer": list(taskset.missing)}
        if mismatches:
            log.warning("%d mismatch(es) between %s and %s (the records' own ground truth is used):", len(mismatches), run.evaluations, run.dataset_name)
            for m in mismatches[:20]:
                log.warning("  idx %s: %s: record %r, dataset %r", m["idx"], m["field"], m["record"], m["dataset"])
        else:
            log.info("records agree with %s (%d questions checked)", run.dataset_name, len(taskset.tasks))

    def make_client() -> ChatClient:
        client = ChatClient(api_key=api_key, base_url=requests.base_url, timeout=requests.timeout, retry=requests.retry_policy())
        log.info("judge %s at %s, %d request(s) in flight, up to %d retries", judge.judge_model, client.base_url, requests.concurrency, requests.max_retries)
        return client

    flat = {**to_dict(run), **to_dict(requests), **judge.record(), "verbose": args.verbose, "quiet": args.quiet}
    meta = {
        "provenance": provenance("subjective_evals.py", argv, flat),
        "input": {
            "evaluations": str(run.evaluations),
            "sha256": input_sha256,
            "stage": taskset.stage,
            "records": taskset.total_records,
        },
    }
    if dataset_check is not None:
        meta["dataset_check"] = dataset_check
    try:
        result = run_judge(
            config,
            taskset=taskset,
            paths=paths,
            make_client=make_client,
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
    missing = len(result.skipped) - len(result.retryable_skipped)
    if missing:
        log.warning("%d question(s) have no answer in %s (listed in %s as missing_model_answer)", missing, run.evaluations, paths.skipped)
    if result.retryable_skipped:
        n = len(result.retryable_skipped)
        log.warning("%d entr%s skipped (see %s); rerun the same command to retry", n, "y" if n == 1 else "ies", paths.skipped)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
