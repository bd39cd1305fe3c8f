"""The launcher's stage registry: the one place the launcher knows its stages.

The entries are :data:`k9bench.stage_table.STAGES` (:class:`~k9bench.stage_table.StageEntry`: the one list of
stages and artifacts, import-free so that the layout and the headers read it too); this module holds the
launcher's glue for the stages the package has, which the entries name as ``"k9bench.pipeline.registry:<name>"``:
how each makes its plan step(s) from the launch settings, and how each builds its Stage object from a step
(from its package module's parser and ``*_from_namespace``: never the root scripts; the launcher does not
import them and does not touch ``sys.path``), and the lookups the rest of :mod:`k9bench.pipeline` uses.

Nothing else in :mod:`k9bench.pipeline` names a stage: the plan, the preflight, the preparation and the run
iterate :data:`STAGES` and read the entry's fields (``tests/test_pipeline_registry.py`` checks that no other
module of the package holds a stage name).
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from k9bench.layout import RunLayout, shard_path
from k9bench.pipeline.stages import PlanContext, Step, demo_note, inference_values
from k9bench.stage_table import STAGES, StageEntry

if TYPE_CHECKING:  # annotations only (LaunchSettings is named, not imported: env and plan reach this module)
    from k9bench.stage import Stage

log = logging.getLogger("k9bench.pipeline")

SHARDED = "inference"
"""The stage a launch may shard (NUM_SHARDS, a SLURM array)."""
SHARD_PREFIX = f"{SHARDED}-shard"
"""A shard's step is ``inference-shard<i>``."""


def shard_name(i: int) -> str:
    return f"{SHARD_PREFIX}{i}"


def flags(e: "StageEntry", s: "LaunchSettings") -> dict[str, str]:
    """The entry's launcher variables by the flag each becomes (``{"--split": "test"}``), in the row's order: their
    texts, which the stage's parser types (:meth:`k9bench.cli.ArgumentParser.parse_values`)."""
    return {flag: s.values[var] for var, flag in e.variables.items()}


# --------------------------------------------------------------------------- each entry's plan steps


def download_steps(e: "StageEntry", c: "PlanContext") -> list[Step]:
    v = c.settings.values
    if c.mode.finalize or v["MAX_FRAMES"] == "0":  # MAX_FRAMES=0 is text-only: no video is read, none is fetched
        return []
    return [Step(name=e.name, script=e.script, values=flags(e, c.settings), outputs=[Path(v[e.writes_to]) / e.files["manifest"]],
                 incomplete_codes=() if v["DOWNLOAD_STRICT"] == "1" else (1,))]


def _inference_step(e: "StageEntry", c: "PlanContext", output: Path, name: str, shard: int | None) -> Step:
    return Step(name=name, script=e.script, values=inference_values(c.settings, e.variables, output, shard, c.mode.num_shards),
                extra=c.settings.extra[e.args_variable], outputs=[output], served=bool(c.settings.values["SERVE"]))


def inference_steps(e: "StageEntry", c: "PlanContext") -> list[Step]:
    if c.mode.finalize:
        return []
    raw = c.layout.paths()["raw"]
    if c.mode.num_shards == 1:
        return [_inference_step(e, c, raw, e.name, None)]
    wanted = [c.mode.shard_id] if c.mode.shard_id is not None else range(c.mode.num_shards)
    return [_inference_step(e, c, shard_path(raw, c.mode.num_shards, i), shard_name(i), i) for i in wanted]


def merge_steps(e: "StageEntry", c: "PlanContext") -> list[Step]:
    n = c.mode.num_shards
    if n == 1:
        return []
    raw = c.layout.paths()["raw"]
    shards = [shard_path(raw, n, i) for i in range(n)]
    return [Step(name=e.name, script=e.script, values={"--output_file": raw, "--expect_shards": n}, positional=tuple(map(str, shards)),
                 outputs=[raw], inputs=list(shards), depends=tuple(shard_name(i) for i in range(n)))]


def calculate_steps(e: "StageEntry", c: "PlanContext") -> list[Step]:
    f = c.layout.paths()
    return [Step(name=e.name, script=e.script, inputs=[f["raw"]], outputs=[f["sim"]], depends=e.reruns_after,
                 values={"--mode": "calculate", "--input_file": [f["raw"]], "--output_file": f["sim"], **flags(e, c.settings)},
                 extra=c.settings.extra[e.args_variable])]


def evaluate_steps(e: "StageEntry", c: "PlanContext") -> list[Step]:
    f = c.layout.paths()
    return [Step(name=e.name, script=e.script, inputs=[f["sim"]], outputs=[f["eval"]], depends=e.reruns_after,
                 values={"--mode": "evaluate", "--input_file": [f["sim"]], "--output_file": f["eval"], **flags(e, c.settings)})]


def _judge_values(e: "StageEntry", s: "LaunchSettings", f: dict[str, Path]) -> dict[str, object]:
    # --fail_on_skipped: entries left skipped end the run with exit 1 (after the report), and the next run retries them
    given = {flag: text for flag, text in flags(e, s).items() if text}  # no JUDGE_BASE_URL: the OpenAI API
    return {"--evaluations": f["eval"], "--output": f["judge"], "--skipped": f["judge_skipped"], **given, "--fail_on_skipped": True}


def judge_steps(e: "StageEntry", c: "PlanContext") -> list[Step]:
    if not c.settings.judge_on:
        return []
    f = c.layout.paths()
    # no reruns_after: its own done() (its requests' content, issue 31) says when evaluate's rerun changed them
    return [Step(name=e.name, script=e.script, inputs=[f["eval"]], outputs=[f["judge"], f["judge_skipped"]],
                 values=_judge_values(e, c.settings, f), extra=c.settings.extra[e.args_variable], incomplete_codes=(1,))]


def judge_probe(e: "StageEntry", s: "LaunchSettings") -> Step:
    """JUDGE_ARGS is checked even while the judge is off: a step that only parses."""
    return Step(name=e.name, script=e.script, outputs=[], values={"--evaluations": Path("eval.json")}, extra=s.extra[e.args_variable])


def judge_config(s: "LaunchSettings") -> str:
    if not s.judge_on:
        return "off (no OPENAI_API_KEY or JUDGE_BASE_URL)"
    key = "set" if s.environ.get("OPENAI_API_KEY") else "not set"
    return f"{s.values['JUDGE_MODEL']} at {s.values['JUDGE_BASE_URL'] or 'the OpenAI API'} (OPENAI_API_KEY {key})"


def report_steps(e: "StageEntry", c: "PlanContext") -> list[Step]:
    """The report over this run and every run of the same model and questions at other MAX_FRAMES
    (found again just before it runs: :func:`refresh_report`)."""
    if c.settings.values["REPORT"] != "1":
        return []
    f = c.layout.paths()
    step = Step(name=e.name, script=e.script, inputs=[f["eval"]], outputs=[f["report"] / "report.md"],
                depends=e.reruns_after)
    refresh_report(step, c.settings, c.layout)
    return [step]


def refresh_report(step: Step, s: "LaunchSettings", layout: RunLayout) -> str | None:
    """Fill in the report's inputs as they are now: the frame-budget runs beside this one, the judge
    file when there is one. Returns the line to say when other runs are in the plot."""
    f = layout.paths()
    evals = [f["eval"]]
    if f["eval"].is_file():
        try:
            from k9bench.report import frame_sweep_files

            evals = list(frame_sweep_files(f["eval"])) or evals
        except Exception as exc:  # noqa: BLE001 (any unreadable neighbour: report this run alone, and say so)
            log.info("step %s: could not look for runs at other MAX_FRAMES in %s (%s); reporting this run alone",
                     step.name, layout.out_dir, exc)
    values: dict[str, object] = {"--mode": "report", "--input_file": list(evals), "--report_dir": f["report"],
                                 **flags(entry(step.name), s)}
    inputs = list(evals)
    if f["judge"].is_file() and f["judge"].stat().st_size:
        values["--judge_files"] = [f["judge"]]
        inputs.append(f["judge"])
    if f["llm_labels"].is_file():  # the LLM labeller's labels (LABEL=1): the report's failure-mode chart
        values["--failure_labels"] = [f["llm_labels"]]
        inputs.append(f["llm_labels"])
    if s.demo:
        what, meaning, _ = demo_note(s)
        values["--note"] = [f"DEMO run: {what}; {meaning}."]
    step.values, step.inputs = values, inputs
    others = len(evals) - 1
    return f"with {others} run(s) of the same model and questions at other MAX_FRAMES (frame-budget plot)" if others else None


# --------------------------------------------------------------------------- each entry's Stage object


def _parsed(parser, step: Step):
    """The step's values and the user's ``*_ARGS`` through the stage's own parser (a Namespace that only the
    stage's own ``*_from_namespace`` reads)."""
    return parser.parse_values(step.values, step.extra)


def build_download(step: Step) -> "Stage":
    from k9bench.download.stage import DownloadStage, build_parser, run_from_namespace

    return DownloadStage(run_from_namespace(_parsed(build_parser(), step), step.argv))


def build_inference(step: Step) -> "Stage":
    from k9bench.inference.stage import InferenceStage, build_parser, checked_config_from_namespace

    # records made with other settings are set aside and redone (the launcher's rerun), never mixed
    return InferenceStage(checked_config_from_namespace(_parsed(build_parser(), step)), step.argv, redo_changed=True)


def build_merge(step: Step) -> "Stage":
    from k9bench.merge import MergeStage

    return MergeStage(list(step.inputs), step.outputs[0], expect_shards=len(step.inputs), argv=step.argv)


def build_calculate(step: Step) -> "Stage":
    from k9bench.scoring.stages import CalculateStage, build_parser, config_from_namespace

    return CalculateStage(config_from_namespace(_parsed(build_parser(), step), step.argv))


def build_evaluate(step: Step) -> "Stage":
    from k9bench.scoring.stages import EvaluateStage, build_parser, config_from_namespace

    return EvaluateStage(config_from_namespace(_parsed(build_parser(), step), step.argv))


def build_judge(step: Step) -> "Stage":
    from k9bench.judge.settings import build_parser, config_from_namespace
    from k9bench.judge.stage import JudgeStage

    return JudgeStage(config_from_namespace(_parsed(build_parser(), step), step.argv))


def build_report(step: Step) -> "Stage":
    from k9bench.report.stage import ReportStage, build_parser, config_from_namespace

    return ReportStage(config_from_namespace(_parsed(build_parser(), step)))


# --------------------------------------------------------------------------- lookups


BY_NAME = {entry.name: entry for entry in STAGES}


def entry(step_name: str) -> StageEntry:
    """The entry of a plan step (``inference-shard3`` is an inference stage)."""
    return BY_NAME[SHARDED if step_name.startswith(SHARD_PREFIX) else step_name]


def script_entry(script: str) -> StageEntry:
    """The first entry run by ``script`` (evaluate_results runs three: they share module and parser)."""
    for e in STAGES:
        if e.script == script:
            return e
    raise KeyError(f"no stage runs {script!r}")


def script_module(script: str) -> ModuleType:
    """The package module of a script or tool (its parser, ``config_from_argv``)."""
    return importlib.import_module(script_entry(script).module)


def variable_flag(name: str) -> tuple[str, str] | None:
    """``(script, flag)`` of the stage flag that types launcher variable ``name`` (its type, choices, default):
    that of the entry marked :attr:`~StageEntry.types_shared` when it takes the variable, else of the first entry
    that does; None when no stage takes it."""
    takers = [e for e in STAGES if name in e.variables]
    if not takers:
        return None
    owner = next((e for e in takers if e.types_shared), takers[0])
    return owner.script, owner.variables[name]


def make_stage(step: Step) -> "Stage":
    """The Stage object that runs ``step`` (its entry's :attr:`~StageEntry.build`)."""
    return entry(step.name).build(step)
