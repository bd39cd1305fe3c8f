"""The judge's settings, its flags and its one configuration object.

Frozen dataclasses whose fields carry the flags of ``subjective_evals.py`` (:class:`JudgeSettings`:
model, prompt, sampling, score rule; :class:`RequestSettings`: endpoint, concurrency, retries;
:class:`JudgeRunSettings`: input, outputs, selection), combined in :class:`JudgeConfig`.
:func:`build_parser` generates the flags from the fields and :func:`config_from_argv` turns an argv
into a checked config (every bad value one line naming its flag, before anything is read or sent).
The defaults are the reference's (SPEC sections 5 and 9): ``gpt-4o``, no temperature sent, scores
read by ``int()`` and kept as given.
"""

from __future__ import annotations

import argparse
import hashlib
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k9bench import layout
from k9bench.data.dataset import DEFAULT_SPLIT
from k9bench.redact import redact
from k9bench.settings import result_fingerprint, setting, to_dict
from k9bench.stage import EXIT_USAGE, StageError
from k9bench.validators import MAX_WAIT_S, at_most, float_in_range, non_negative_int, positive_float, positive_int

DEFAULT_JUDGE_MODEL = "gpt-4o"
"""The judge model when ``--judge_model`` is not given (the paper's judge); defined here only."""

MISSING_MODEL_ANSWER = "missing_model_answer"
"""Skip reason (the reference's) of a dataset question with no record in the judged file."""

BUILTIN_PROMPT = "builtin:judge_prompt"
"""The source of the built-in judge prompt, as recorded."""


class JudgeInputError(StageError):
    """The evaluations file, the prompt, a flag or an earlier output cannot be used; one line naming
    what and where (exit 2, before any request)."""

    exit_code = EXIT_USAGE


_TEMPERATURE_RANGE = float_in_range(0.0, 2.0)


def temperature_value(text: str) -> float | None:
    """``--temperature``: a number in [0, 2], or ``none``/``default`` for the API's own default (not sent)."""
    if str(text).strip().lower() in ("none", "default"):
        return None
    try:
        return _TEMPERATURE_RANGE(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or 'none' for the API's own default)") from None


@dataclass(frozen=True)
class JudgeSettings:
    """What shapes a judgement: model, prompt, sampling, the score rule. The ``result=True`` fields
    and the prompt's sha256 form the fingerprint."""

    judge_model: str = setting(
        DEFAULT_JUDGE_MODEL,
        "judge model id (default: %(default)s); pin a dated snapshot (e.g. gpt-4o-2024-08-06) for comparable numbers",
        result=True,
    )
    temperature: float | None = setting(
        None, "judge sampling temperature, 0-2 (default: not sent, so the API's own default applies, as the reference does)",
        type=temperature_value, result=True,
    )
    max_tokens: int | None = setting(
        None, "limit on the judge's reply length (default: the API's)", type=at_most(positive_int, 1_000_000)
    )  # not a result setting: raising it to retry replies cut short must not refuse the earlier entries
    strict_scores: bool = setting(
        False, "skip an entry whose score is out of 1-10 or a bool (default: kept as given and flagged, as the reference does)",
        action="store_true", result=True,
    )
    prompt_file: str | None = setting(
        None, "judge prompt template used verbatim instead of ours ({question}, {correct_answer}, {model_output})"
    )
    template: str = setting("", "the judge prompt template (the built-in one, or --prompt_file's text)", cli=False)
    prompt_source: str = setting(BUILTIN_PROMPT, "where the template came from (builtin:judge_prompt or the file)", cli=False)

    @property
    def prompt_sha256(self) -> str:
        """SHA-256 of the template (part of the fingerprint)."""
        return hashlib.sha256(self.template.encode("utf-8")).hexdigest()

    def record(self) -> dict:
        """The settings as written to the meta sidecar (the template by its source and sha256)."""
        from k9bench.data.published import CONFIRMED_PROMPTS, is_reference_prompt

        out = {k: v for k, v in to_dict(self).items() if k != "template"}
        out["prompt_sha256"] = self.prompt_sha256
        reference = is_reference_prompt("judge_prompt", self.template)
        out["reference_prompt"] = reference  # by the reference's hash (k9bench.data.published), issue 24 item 4
        out["prompt_status"] = CONFIRMED_PROMPTS if reference else (
            "ours (built in)" if self.prompt_source == BUILTIN_PROMPT else "unconfirmed (not the reference's by its hash)")
        return out

    def request_params(self) -> dict:
        """The sampling parameters sent with each request: only those given (the reference sends
        ``model`` and ``messages`` alone)."""
        params = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        return {k: v for k, v in params.items() if v is not None}


@dataclass(frozen=True)
class RequestSettings:
    """How judge requests are sent (no effect on the scores)."""

    base_url: str | None = setting(None, "OpenAI-compatible endpoint (vLLM, SGLang, Azure, a proxy); default: the OpenAI API")
    concurrency: int = setting(8, "requests in flight at once (default: %(default)s)", type=at_most(positive_int, 1024))
    max_retries: int = setting(
        5, "retries per request on 429, 5xx, timeouts and connection errors (default: %(default)s)",
        type=at_most(non_negative_int, 100),
    )
    timeout: float = setting(120.0, "seconds per request attempt (default: %(default)s)", type=at_most(positive_float, MAX_WAIT_S))
    retry_backoff: float = setting(
        1.0, "seconds before the first retry, doubled each time, with jitter (default: %(default)s)",
        type=at_most(positive_float, MAX_WAIT_S),
    )
    retry_backoff_max: float = setting(60.0, "ceiling of the retry backoff in seconds (default: %(default)s)",
                                       type=at_most(positive_float, MAX_WAIT_S))
    no_cache: bool = setting(
        False, "do not read or write the store of paid replies (<output folder>/.judge_cache/): every request not in an "
        "earlier output of the same name is sent", action="store_true",
    )

    def retry_policy(self) -> Any:
        """The :class:`k9bench.serving.openai_api.RetryPolicy` these settings describe."""
        from k9bench.serving.openai_api import RetryPolicy

        return RetryPolicy(max_retries=self.max_retries, backoff_base=self.retry_backoff, backoff_max=self.retry_backoff_max)

    def record(self) -> dict:
        """As written to the meta sidecar (secrets inside ``base_url`` masked)."""
        return redact(to_dict(self))


@dataclass(frozen=True)
class JudgeRunSettings:
    """What is judged, where the results go, and what the exit status says."""

    evaluations: str | None = setting(
        None, "raw, sim or eval JSON file (individual_results, or the older threshold_results layout)", required=True
    )
    output: str | None = setting(None, "judge JSON list (default: judge_<name>.json beside --evaluations)")
    skipped: str | None = setting(None, "skipped entries JSON list (default: <output stem>_skipped.json)")
    limit: int | None = setting(None, "judge only the first N answered questions (idx order); N at least 1", type=positive_int)
    subset: str | None = setting(None, "judge only these questions (only those are paid for): a subset file (python -m "
                                 "k9bench.data.subset), a JSON file listing idx, or a run's raw/sim/eval file; --limit then counts among "
                                 "them", metavar="FILE")
    dataset_name: str | None = setting(
        None,
        "cross-check the records against this dataset (Hub id, local file, or 'demo'), report mismatches, and list "
        f"its questions that have no record in the file as skipped ({MISSING_MODEL_ANSWER})",
    )
    split: str = setting(DEFAULT_SPLIT, "dataset split for --dataset_name (default: %(default)s)")
    fail_on_skipped: bool = setting(
        False, "exit 1 when entries were skipped (default: exit 0, as the reference does, with the count on the last line)",
        action="store_true",
    )
    on_change: str = setting(
        "refuse", "earlier outputs made with other settings or another evaluations file: 'refuse' (exit 2) or 'redo' "
        "(judge afresh; the pipeline's choice)", cli=False,
    )


@dataclass(frozen=True)
class JudgeConfig:
    """Everything a judge run needs, built once by :func:`config_from_argv`."""

    judge: JudgeSettings = field(default_factory=JudgeSettings)
    """Model, prompt, sampling, score rule."""
    requests: RequestSettings = field(default_factory=RequestSettings)
    """Endpoint, concurrency, retries."""
    run: JudgeRunSettings = field(default_factory=JudgeRunSettings)
    """Input, outputs, selection, exit rule."""
    argv: tuple = ()
    """The command line, for provenance (secrets masked when written)."""
    verbose: int = 0
    """``-v`` count (for provenance)."""
    quiet: bool = False
    """``-q`` (for provenance)."""


def judge_fingerprint(settings: JudgeSettings) -> dict:
    """The settings that change a judgement: the ``result=True`` fields and the prompt's sha256."""
    return {**result_fingerprint(settings), "prompt_sha256": settings.prompt_sha256}


# ---------------------------------------------------------------------------
# Where a run reads and writes (checked by config_from_argv, so the launcher's preflight sees it)


def sidecar_path(output: str | Path, suffix: str) -> Path:
    """``<output>.<suffix>`` (e.g. ``meta.json``, ``summary.json``)."""
    output = Path(output)
    return output.with_name(f"{output.name}.{suffix}")


@dataclass(frozen=True)
class RunPaths:
    """Where a judge run reads and writes."""

    output: Path
    """The judge JSON list."""
    skipped: Path
    """The skipped list."""

    @property
    def checkpoint(self) -> Path:
        return layout.checkpoint_path(self.output)

    @property
    def meta(self) -> Path:
        return sidecar_path(self.output, "meta.json")

    @property
    def summary(self) -> Path:
        return sidecar_path(self.output, "summary.json")


def base_url_setting() -> str:
    """``--base_url``, or ``JUDGE_BASE_URL`` under the launcher (:func:`k9bench.models.hub.setting_name`)."""
    from k9bench.models.hub import setting_name

    return setting_name("--base_url", "JUDGE_BASE_URL")


def resolve_paths(run: JudgeRunSettings) -> RunPaths:
    """The output and skipped paths (defaults from :mod:`k9bench.layout`); :class:`JudgeInputError`
    when ``--output`` is not a file name or ``--skipped`` is one of the output's own files. (Whether
    they can be written is :func:`k9bench.stage.check_output`'s, called by ``run_stage``.)"""
    evaluations = Path(str(run.evaluations))
    output = Path(run.output) if run.output is not None else layout.next_stage_path(evaluations, "judge")
    if output.name in ("", ".", ".."):
        raise JudgeInputError(f"--output {run.output or repr(run.output)}: not a file name; give a file such as judge.json")
    skipped = Path(run.skipped) if run.skipped is not None else layout.skipped_path(output)
    paths = RunPaths(output=output, skipped=skipped)
    taken = {paths.output.resolve(): "--output", paths.checkpoint.resolve(): "the checkpoint of --output",
             paths.meta.resolve(): "the meta sidecar of --output", paths.summary.resolve(): "the summary sidecar of --output"}
    if paths.skipped.resolve() in taken:
        raise JudgeInputError(f"--skipped {paths.skipped} is also {taken[paths.skipped.resolve()]}; give another name")
    return paths


def build_parser() -> argparse.ArgumentParser:
    """The flags of ``subjective_evals.py``, generated from the settings fields."""
    from k9bench.cli import ArgumentParser, add_logging_args
    from k9bench.settings import add_arguments

    p = ArgumentParser(
        prog="subjective_evals.py",
        description="LLM-as-judge scoring of K9-Bench answers (Logic, Factuality, Accuracy, Conciseness, Overall; 1-10).",
    )
    add_arguments(p, JudgeRunSettings, only=("evaluations", "output", "skipped"))
    g = p.add_argument_group("judge")
    add_arguments(g, JudgeSettings, only=("judge_model",))
    add_arguments(g, RequestSettings, only=("base_url",))
    add_arguments(g, JudgeSettings, exclude=("judge_model",))
    add_arguments(p.add_argument_group("requests"), RequestSettings, exclude=("base_url",))
    add_arguments(p.add_argument_group("selection, checks and exit status"), JudgeRunSettings,
                  only=("limit", "subset", "dataset_name", "split", "fail_on_skipped"))
    add_logging_args(p)
    return p


PLACEHOLDERS = ("question", "correct_answer", "model_output")
"""The fields a judge prompt template must contain (each once or more, plainly: no format spec)."""


def check_prompt_template(template: str, source: str) -> None:
    """Refuse a template that ``str.format`` cannot fill safely: a syntax error, an unknown or
    missing placeholder, or a placeholder with a format spec or conversion (``{model_output:>99999999999}``
    would build a string of that width: refused before any request)."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise JudgeInputError(f"judge prompt {source}: not a valid template ({exc}); write literal braces as {{{{ and }}}}") from None
    fields = {name for _, name, _, _ in parsed if name is not None}
    unknown = sorted(f for f in fields if f not in PLACEHOLDERS)
    if unknown:
        raise JudgeInputError(
            f"judge prompt {source}: unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)}; "
            f"only {{question}}, {{correct_answer}} and {{model_output}} are filled (write literal braces as {{{{ and }}}})"
        )
    dressed = sorted({name for _, name, spec, conv in parsed if name is not None and (spec or conv)})
    if dressed:
        raise JudgeInputError(
            f"judge prompt {source}: placeholder(s) {', '.join('{' + d + '}' for d in dressed)} carry a format spec or "
            "conversion (e.g. {model_output:>99}); write each one plainly"
        )
    missing = [p for p in PLACEHOLDERS if p not in fields]
    if missing:
        raise JudgeInputError(f"judge prompt {source}: lacks the placeholder(s) {', '.join('{' + m + '}' for m in missing)}")


def render_prompt(template: str, *, question: str, correct_answer: str, model_output: str) -> str:
    """The judge prompt for one question (``template`` passed :func:`check_prompt_template`)."""
    return template.format(question=question, correct_answer=correct_answer, model_output=model_output)


def load_template(prompt_file: str | None) -> tuple[str, str]:
    """``(template, source)`` of the judge prompt, checked (:func:`check_prompt_template`). A
    ``--prompt_file`` is read verbatim through :func:`k9bench.artifacts.read_text` (the one reader):
    missing, a folder, not UTF-8 or empty is one :class:`JudgeInputError` line naming the flag and file."""
    if prompt_file:
        from k9bench.artifact_io import ArtifactError, read_text

        try:
            template, source = read_text(prompt_file), str(prompt_file)
        except ArtifactError as exc:
            raise JudgeInputError(f"--prompt_file {exc}") from None
    else:
        from k9bench.prompts import load_prompt

        template, source = load_prompt("judge_prompt", None)
    check_prompt_template(template, source)
    return template, source


def config_from_argv(argv: list[str] | None) -> JudgeConfig:
    """Parse ``argv`` (argparse's usage errors exit 2) and check what can be checked before any file is
    read: the endpoint's form and the prompt template. Raises a :class:`k9bench.stage.StageError` (one
    line naming the flag)."""
    return config_from_namespace(build_parser().parse_args(argv), argv)


def config_from_namespace(args: argparse.Namespace, argv: list[str] | None = None) -> JudgeConfig:
    """The one step where the parsed flags become the judge's settings (see :func:`config_from_argv`)."""
    from k9bench.serving.endpoint import check_base_url
    from k9bench.redact import register_url_secrets
    from k9bench.settings import from_namespace

    requests = from_namespace(RequestSettings, args)
    register_url_secrets(requests.base_url)  # a key inside http://user:KEY@host is masked everywhere
    check_base_url(requests.base_url)  # BadBaseUrl (exit 2, one line) for a URL without a scheme, at once
    run = from_namespace(JudgeRunSettings, args)
    resolve_paths(run)  # --output not a file name, --skipped one of the output's own files: refused now
    template, source = load_template(args.prompt_file)
    judge = from_namespace(JudgeSettings, args, template=template, prompt_source=source)
    return JudgeConfig(judge=judge, requests=requests, run=run, argv=tuple(argv or ()), verbose=args.verbose, quiet=args.quiet)


__all__ = [
    "BUILTIN_PROMPT", "DEFAULT_JUDGE_MODEL", "MISSING_MODEL_ANSWER", "PLACEHOLDERS", "JudgeConfig", "JudgeInputError",
    "JudgeRunSettings", "JudgeSettings", "RequestSettings", "RunPaths", "build_parser", "check_prompt_template", "config_from_argv",
    "base_url_setting", "config_from_namespace", "judge_fingerprint", "load_template", "render_prompt", "resolve_paths",
    "sidecar_path", "temperature_value",
]
