"""The LLM labeller: a model's wrong answers sorted into the failure types by an OpenAI-compatible model.

``python -m k9bench.people llm-label --evaluations eval_M.json [--labeller_model gpt-4o] [--base_url URL]`` (and
the launcher's ``llm-label`` stage, after the judge, off unless ``LABEL=1``: the judge's model and endpoint) asks, for each
wrong answer (eval records scored wrong that did not fail at inference; ``--sample N --seed S`` for a
stratified sample), which failure type it shows, with :data:`PROMPT`: our own words. It runs on the
judge's machinery: the same request flags (:class:`k9bench.judge.settings.RequestSettings`: endpoint,
concurrency, retries), the same client (:class:`k9bench.serving.openai_api.ChatClient`), the same
content-addressed store of paid replies (:class:`k9bench.judge.cache.ReplyStore`, ``.judge_cache/`` beside
the output: a reply is never bought twice, across reruns and output names), and a per-record checkpoint
(a stopped run resumes; a rerun sends nothing already answered). The output is a labels file
(:mod:`k9bench.people.labels`, ``labeller_kind`` ``llm``) that the report reads beside people's
(``--failure_labels``), with Cohen's kappa where both labelled the same answers.

A reply without a usable label is skipped (listed in the file's ``skipped`` with the reason) and sent
again on the next run. Exit status: 0; 1 when some answers were left unlabelled; 2 for a bad input.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

from k9bench.judge.settings import DEFAULT_JUDGE_MODEL, RequestSettings, temperature_value
from k9bench.people import LABELS
from k9bench.people.labelling_run import PROMPT, label_all, labeller_name
from k9bench.settings import add_arguments, from_namespace, result_fingerprint, setting
from k9bench.stage import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Stage, StageError, run_stage
from k9bench.validators import non_negative_int, positive_int

log = logging.getLogger("k9bench.people")


@dataclass(frozen=True)
class LabellerSettings:
    """What shapes a label."""

    labeller_model: str = setting(DEFAULT_JUDGE_MODEL, "the labelling model id (default: %(default)s, the judge's default)", result=True)
    temperature: float | None = setting(0.0, "sampling temperature, 0-2, or 'none' for the API's default (default: %(default)s)",
                                        type=temperature_value, result=True)
    max_tokens: int | None = setting(None, "limit on a reply's length (default: the API's)", type=positive_int)

    def request_params(self) -> dict:
        return {k: v for k, v in {"temperature": self.temperature, "max_tokens": self.max_tokens}.items() if v is not None}


@dataclass(frozen=True)
class LabellerRunSettings:
    """What is labelled and where the labels go."""

    evaluations: str = setting(None, "the model's eval file (evaluate_results.py --mode evaluate)", required=True, metavar="EVAL_JSON")
    output: str | None = setting(None, "the labels file (default: labels_llm-<labeller model>_<model>.json beside --evaluations)")
    sample: int | None = setting(None, "label N wrong answers, stratified by category (default: all)", type=positive_int, metavar="N",
                                 result=True)
    seed: int = setting(0, "seed of --sample (default: %(default)s)", type=non_negative_int, result=True)


@dataclass(frozen=True)
class LabellerConfig:
    labeller: LabellerSettings = field(default_factory=LabellerSettings)
    requests: RequestSettings = field(default_factory=RequestSettings)
    run: LabellerRunSettings = field(default_factory=LabellerRunSettings)


def add_labeller_args(p: argparse.ArgumentParser) -> None:
    """The labeller's flags (its own parser's, and ``python -m k9bench.people llm-label``'s), logging's aside."""
    add_arguments(p, LabellerRunSettings)
    add_arguments(p.add_argument_group("labeller"), LabellerSettings)
    add_arguments(p.add_argument_group("requests (as the judge's)"), RequestSettings)


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser, add_logging_args

    p = ArgumentParser(prog="python -m k9bench.people llm-label", description="The LLM labeller of wrong answers (docs/people.md).")
    add_labeller_args(p)
    add_logging_args(p)
    return p


def config_from_namespace(args: argparse.Namespace) -> LabellerConfig:
    return LabellerConfig(labeller=from_namespace(LabellerSettings, args), requests=from_namespace(RequestSettings, args),
                          run=from_namespace(LabellerRunSettings, args))


class LabellerStage(Stage):
    """The LLM labeller behind the stage contract."""

    name = "llm-label"

    def __init__(self, config: LabellerConfig):
        self.config = config
        self._art = None

    def _records(self):
        if self._art is None:
            from k9bench.artifacts import load_records_artifact

            self._art = load_records_artifact(self.config.run.evaluations, allow_empty=False)
        return self._art

    @property
    def model(self) -> str:
        return next((r.model_name for r in self._records().records if r.model_name), Path(self.config.run.evaluations).stem)

    def outputs(self) -> list[Path]:
        from k9bench.people.labels import labels_path

        run = self.config.run
        if run.output:
            return [Path(run.output)]
        return [labels_path(Path(run.evaluations).parent, labeller_name(self.config.labeller.labeller_model), self.model)]

    def output_flags(self) -> list[str]:
        return ["--output"]

    def inputs(self) -> list[Path]:
        return [Path(self.config.run.evaluations)]

    def fingerprint(self) -> dict:
        return {**result_fingerprint(self.config.labeller, self.config.run),
                "prompt_sha256": hashlib.sha256(PROMPT.encode("utf-8")).hexdigest()}

    def run(self) -> int:
        from k9bench.artifact_io import ArtifactError
        from k9bench.redact import register_secret, register_url_secrets
        from k9bench.serving.openai_api import MissingApiKey, resolve_api_key

        cfg = self.config
        register_url_secrets(cfg.requests.base_url)
        try:
            api_key = resolve_api_key(cfg.requests.base_url)
        except MissingApiKey as exc:
            raise StageError(str(exc)) from None
        register_secret(api_key)
        try:
            records = self._records().records
        except ArtifactError as exc:
            raise StageError(f"--evaluations {exc}") from None
        if not any(r.is_correct is not None for r in records):
            raise StageError(f"--evaluations {cfg.run.evaluations}: no record carries a verdict (is_correct); give an eval file")
        result = label_all(self, records, api_key)
        counts = {k: sum(1 for r in result["labels"] if r["label"] == k) for k in LABELS}
        print(f"labels ({len(result['labels'])}): " + ", ".join(f"{k} {n}" for k, n in counts.items() if n))
        left = len(result["skipped"])
        line = (f"llm-label: {len(result['labels'])} labelled, {left} left unlabelled, {result['run']['sent_this_run']} sent, "
                f"{result['run']['from_store']} from the reply store -> {self.outputs()[0]}")
        (log.warning if left else log.info)("%s%s", line, " (rerun the same command to retry them)" if left else "")
        return EXIT_FAILED if left else EXIT_OK


def build(step) -> LabellerStage:
    """A launcher plan step -> its Stage (its values through :func:`build_parser`)."""
    return LabellerStage(config_from_namespace(build_parser().parse_values(step.values, step.extra)))


def steps(e, c) -> list:
    """``LABEL=1``: one step after the judge, on the judge's model and endpoint (the entry's ``variables``); none otherwise."""
    from k9bench.pipeline.stages import Step

    if c.settings.values["LABEL"] != "1":
        return []
    f = c.layout.paths()
    given = {flag: c.settings.values[var] for var, flag in e.variables.items() if c.settings.values[var]}
    return [Step(name=e.name, script=e.script, inputs=[f["eval"]], outputs=[f["llm_labels"]], incomplete_codes=(1,),
                 values={"--evaluations": f["eval"], "--output": f["llm_labels"], **given})]


def check(s, environ: dict) -> None:
    """Its preflight: LABEL=1 needs the judge's endpoint (OPENAI_API_KEY or JUDGE_BASE_URL), refused before any stage."""
    from k9bench.pipeline.preflight import PreflightError

    if not s.judge_on:
        raise PreflightError("LABEL=1: the LLM labeller uses the judge's endpoint; set OPENAI_API_KEY or JUDGE_BASE_URL "
                             "(or LABEL=0)")


def main(argv: list[str] | None = None) -> int:
    from k9bench.logs import setup_logging

    args = build_parser().parse_args(argv)
    setup_logging(args.verbose, args.quiet)
    try:
        stage = LabellerStage(config_from_namespace(args))
        stage.outputs()  # an unreadable --evaluations (an ArtifactError, a StageError): one line, exit 2
    except StageError as exc:
        log.error("--evaluations %s" if not str(exc).startswith("--") else "%s", exc)
        return EXIT_USAGE
    return run_stage(stage)


if __name__ == "__main__":
    sys.exit(main())
