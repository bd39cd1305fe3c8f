"""The judge as a :class:`k9bench.stage.Stage`: its outputs, inputs, fingerprint, and one run.

``run_stage(JudgeStage(config))`` checks and locks the four outputs (the judge list, the skipped list,
the meta and summary sidecars), installs the stop policy (SIGTERM, SIGUSR1, SIGINT: exit 75, the
checkpoint kept) and calls :meth:`JudgeStage.run`, which, in this order and before the first paid
request: resolves the key, reads the evaluations file, reads the dataset (``--dataset_name``),
refuses earlier files made otherwise, and probes the endpoint.

Exit status: 0 done (skipped entries included, their count on the last line; ``--fail_on_skipped``
makes that 1); 2 bad input, a missing key, an endpoint that does not answer, earlier files made with
other settings; 75 stopped by a signal (rerun to finish).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from k9bench.judge.run import read_meta, run_judge
from k9bench.judge.score import MAX_REPLY_CHARS, format_summary
from k9bench.judge.settings import BUILTIN_PROMPT, MISSING_MODEL_ANSWER, JudgeConfig, JudgeInputError, RunPaths, judge_fingerprint, resolve_paths
from k9bench.settings import fingerprint_differences, to_dict
from k9bench.stage import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Stage, file_digest

log = logging.getLogger("k9bench.judge")

PROBE_TIMEOUT = 5.0
"""Seconds the endpoint has to answer the probe made before the first question."""


class EndpointUnreachable(JudgeInputError):
    """The judge endpoint did not answer the probe (a wrong ``--base_url``, a server that is down)."""


def _without_userinfo(url: str) -> str:
    """``url`` without ``user:key@`` (any HTTP answer, a 401 included, shows the server is there; the
    probe's HTTP client would take ``user:key@host`` for a host name)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def probe(client: Any, base_url: str | None, api_key: str) -> None:
    """One quick ``GET <endpoint>/models`` (:func:`k9bench.serving.openai_api.probe_endpoint`) before the first
    question: any HTTP answer (even 401 or 404) means the server is there; none within
    :data:`PROBE_TIMEOUT` seconds raises :class:`EndpointUnreachable` (exit 2, one line), so a wrong
    endpoint fails in seconds instead of retrying every question."""
    from k9bench.serving import openai_api
    from k9bench.redact import redact_text

    url = base_url or str(client.base_url)
    try:
        status = openai_api.probe_endpoint(_without_userinfo(url), api_key=api_key, timeout=PROBE_TIMEOUT)
    except openai_api.EndpointUnreachable as exc:
        raise EndpointUnreachable(redact_text(f"--base_url {url}: the judge endpoint does not answer ({exc})")) from None
    log.debug("endpoint %s answered the probe (HTTP %s)", redact_text(url), status)


class JudgeStage(Stage):
    """The LLM-as-judge stage (see the module doc)."""

    name = "judge"

    def __init__(self, config: JudgeConfig):
        self.config = config
        self.paths: RunPaths = resolve_paths(config.run)
        self._taskset: Any = None

    # -- the contract -----------------------------------------------------------------------------
    def outputs(self) -> list[Path]:
        p = self.paths
        return [p.output, p.skipped, p.meta, p.summary]

    def output_flags(self) -> list[str]:
        return ["--output", "--skipped", "--output (its meta sidecar)", "--output (its summary sidecar)"]

    def inputs(self) -> list[Path]:
        return [Path(str(self.config.run.evaluations))]

    def _subset(self) -> Any:
        """The ``--subset`` (:class:`k9bench.data.subset.Subset`), or None; JudgeInputError for a bad file."""
        if not self.config.run.subset:
            return None
        from k9bench.data.subset import SubsetError, read_subset

        try:
            return read_subset(self.config.run.subset)
        except SubsetError as exc:
            raise JudgeInputError(str(exc)) from None

    def _tasks(self) -> Any:
        """The evaluations file's tasks, those of ``--subset`` only (read once per stage object; JudgeInputError for a bad file)."""
        if self._taskset is None:
            from dataclasses import replace

            from k9bench.data.subset import restrict
            from k9bench.judge.tasks import build_tasks

            taskset = build_tasks(Path(str(self.config.run.evaluations)))
            chosen = self._subset()
            if chosen is not None:
                kept = restrict(taskset.tasks, chosen)
                failed = [f for f in taskset.failed if f["idx"] in chosen.idx]
                log.info("--subset %s: %d of the file's %d answered questions (%s)", self.config.run.subset, len(kept),
                         len(taskset.tasks), chosen.description)
                taskset = replace(taskset, tasks=kept, failed=failed, total_records=len(kept) + len(failed))
            self._taskset = taskset
        return self._taskset

    def request_keys(self) -> dict:
        """idx -> request key of every question this run covers (after ``--limit``)."""
        from k9bench.judge.score import task_key

        tasks = self._tasks().tasks
        limit = self.config.run.limit
        targets = tasks[:limit] if limit is not None else tasks
        return {t.idx: task_key(t, self.config.judge) for t in targets}

    def input_digests(self) -> dict[str, str]:
        """The judge's input is exactly what its requests contain (issue 31): one digest of every
        question's request key, so a change that no request sees (a threshold, a verdict) leaves it done."""
        from k9bench.judge.cache import requests_digest

        return {f"judge requests of {self.config.run.evaluations}": requests_digest(self.request_keys())}

    def fingerprint(self) -> dict:
        """Judge model, prompt sha256, temperature sent, score rule (:func:`judge_fingerprint`)."""
        return judge_fingerprint(self.config.judge)

    def selection(self) -> dict:
        """Which questions the output covers (not a result setting of an entry, but of the file)."""
        from k9bench.data.subset import subset_digest

        run = self.config.run
        out = {"limit": run.limit, "dataset_name": run.dataset_name, "split": run.split if run.dataset_name else None}
        if run.subset:  # the subset's questions by content
            out["subset_sha256"] = subset_digest(run.subset)
        return out

    def recorded(self) -> dict | None:
        """The stage block in the meta sidecar (the judge JSON itself is a bare list)."""
        try:
            meta = read_meta(self.paths)
        except JudgeInputError:
            return None
        block = (meta or {}).get("stage")
        return block if isinstance(block, dict) else None

    def done(self) -> str | None:
        if not all(p.exists() for p in self.outputs()):
            return super().done()
        try:
            self._tasks()
        except JudgeInputError as exc:
            return str(exc)
        recorded = ((self.recorded() or {}).get("selection")) or {}
        diffs = fingerprint_differences(recorded, self.selection())
        if diffs and self.recorded() is not None:  # before the requests: another --limit covers other requests
            return f"selection differs: {'; '.join(diffs)}"
        why = super().done()
        if why is not None:
            return why
        if self.paths.checkpoint.exists():
            return f"{self.paths.checkpoint} holds an unfinished run"
        return None

    def stage_block(self) -> dict:
        return {**super().stage_block(), "selection": self.selection()}

    # -- the work ---------------------------------------------------------------------------------
    def run(self) -> int:
        from k9bench.serving.openai_api import ChatClient, MissingApiKey, resolve_api_key
        from k9bench.redact import register_secret, register_url_secrets

        cfg = self.config
        register_url_secrets(cfg.requests.base_url)
        try:  # the key first: nothing is read or sent before we know we can call the judge
            api_key = resolve_api_key(cfg.requests.base_url)
        except MissingApiKey as exc:
            raise JudgeInputError(str(exc)) from None
        register_secret(api_key)
        if cfg.judge.prompt_source != BUILTIN_PROMPT:
            log.info("judge prompt replaced verbatim by %s", cfg.judge.prompt_source)
        evaluations = Path(str(cfg.run.evaluations))
        taskset = self._tasks()
        input_sha256 = file_digest(evaluations)
        log.info("%s: %s file, %d record(s), %d answered", evaluations, taskset.stage, taskset.total_records, len(taskset.tasks))
        taskset, dataset_check = self._dataset_check(taskset)

        def make_client() -> ChatClient:
            r = cfg.requests
            client = ChatClient(api_key=api_key, base_url=r.base_url, timeout=r.timeout, retry=r.retry_policy(),
                                max_reply_chars=MAX_REPLY_CHARS + 1)  # a reply over the cap is cut before it is scanned
            sent = cfg.judge.request_params()
            log.info("judge %s at %s, %d request(s) in flight, up to %d retries; sampling sent: %s", cfg.judge.judge_model,
                     client.base_url, r.concurrency, r.max_retries, sent or "none (the API's defaults, as the reference)")
            return client

        result = run_judge(cfg, taskset=taskset, paths=self.paths, make_client=make_client, meta=self._meta(taskset, input_sha256, dataset_check),
                           input_sha256=input_sha256, stage_block=self.stage_block(),
                           before_first_request=lambda client: probe(client, cfg.requests.base_url, api_key))
        if result.unreachable:
            return EXIT_USAGE
        print(format_summary(result.summary))
        missing = len(result.skipped) - len(result.retryable_skipped)
        if missing:
            log.warning("%d question(s) have no answer in %s (listed in %s as missing_model_answer)", missing, evaluations, self.paths.skipped)
        n = len(result.retryable_skipped)
        last = (f"judge: {len(result.entries)} scored, {n} skipped"
                + (f", {missing} without an answer in the file ({MISSING_MODEL_ANSWER})" if missing else "")
                + f" -> {self.paths.output}, {self.paths.skipped}" + (" (rerun the same command to retry the skipped ones)" if n else ""))
        if n and cfg.run.fail_on_skipped:
            log.error("%s; exit %d (--fail_on_skipped)", last, EXIT_FAILED)
            return EXIT_FAILED
        (log.warning if n else log.info)("%s", last)
        return EXIT_OK

    def _dataset_check(self, taskset: Any) -> tuple[Any, dict | None]:
        run = self.config.run
        if not run.dataset_name:
            return taskset, None
        from k9bench.data.dataset import DatasetError, load_questions
        from k9bench.judge.tasks import cross_check, with_missing_answers

        try:
            loaded = load_questions(run.dataset_name, run.split)
        except DatasetError as exc:
            raise JudgeInputError(f"--dataset_name {run.dataset_name}: {exc}") from None
        from k9bench.data.subset import restrict

        questions = restrict(loaded.questions, self._subset())  # a question outside --subset is not missing
        mismatches = cross_check(taskset.tasks, questions)
        taskset = with_missing_answers(taskset, questions)
        if mismatches:
            log.warning("%d mismatch(es) between %s and %s (the records' own ground truth is used):", len(mismatches), run.evaluations, run.dataset_name)
            for m in mismatches[:20]:
                log.warning("  idx %s: %s: record %r, dataset %r", m["idx"], m["field"], m["record"], m["dataset"])
        else:
            log.info("records agree with %s (%d questions checked)", run.dataset_name, len(taskset.tasks))
        return taskset, {"dataset": run.dataset_name, "split": run.split, "mismatches": mismatches, "missing_model_answer": list(taskset.missing)}

    def _meta(self, taskset: Any, input_sha256: str, dataset_check: dict | None) -> dict:
        from k9bench.artifacts import provenance

        cfg = self.config
        flat = {**to_dict(cfg.run), **to_dict(cfg.requests), **cfg.judge.record(), "verbose": cfg.verbose, "quiet": cfg.quiet}
        meta: dict = {
            "provenance": provenance("subjective_evals.py", list(cfg.argv), flat),
            "input": {"evaluations": str(cfg.run.evaluations), "sha256": input_sha256, "stage": taskset.stage, "records": taskset.total_records},
        }
        if dataset_check is not None:
            meta["dataset_check"] = dataset_check
        return meta


__all__ = ["EndpointUnreachable", "JudgeStage", "PROBE_TIMEOUT", "probe"]
