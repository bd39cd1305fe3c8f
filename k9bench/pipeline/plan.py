"""The plan: which stages one launcher run has, with what arguments, and why each will or will not run.

:func:`build_steps` turns the checked settings into the ordered :class:`~k9bench.pipeline.stages.Step`
list by asking each entry of the stage registry (:data:`k9bench.pipeline.registry.STAGES`, in its order)
for its steps; no stage is named here. :func:`check_steps` parses every argv with its stage's own parser
before anything runs (so a bad ``INFER_ARGS`` is refused up front); :func:`describe_plan` says for each
stage whether it runs and why (``--dry_run``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from k9bench.layout import RunLayout
from k9bench.pipeline import registry
from k9bench.pipeline.env import LaunchError, LaunchSettings
from k9bench.pipeline.stages import Step

log = logging.getLogger("k9bench.pipeline")

SERVED_URL = "http://127.0.0.1:0/v1"
"""Stands for the URL of the server SERVE=vllm starts (known once it runs; not part of any record)."""


@dataclass(frozen=True)
class ShardMode:
    """How this run shards inference (from NUM_SHARDS/SHARD_ID or the SLURM array: :mod:`k9bench.pipeline.slurm`)."""

    num_shards: int = 1
    shard_id: int | None = None
    """Only this shard (an array task, or SHARD_ID); None: every shard in turn."""
    finalize: bool = False
    """K9_FINALIZE=1: merge and score only (the array's merge job)."""
    in_array: bool = False

    @property
    def shard_only(self) -> bool:
        """This launch runs one shard of several (an array task, SHARD_ID): the merge job (or K9_FINALIZE=1)
        does the rest."""
        return self.num_shards > 1 and self.shard_id is not None and not self.finalize


@dataclass(frozen=True)
class PlanContext:
    """What an entry's :attr:`~k9bench.pipeline.registry.StageEntry.steps` makes its steps from."""

    settings: LaunchSettings
    layout: RunLayout
    mode: ShardMode


def video_transport() -> str:
    """The transport that sends our sampled frames as a video to a vLLM/SGLang server."""
    from k9bench.inference.settings import TRANSPORTS

    return "video" if "video" in TRANSPORTS else "video_url"


def inference_argv(s: LaunchSettings, output: Path, shard: int | None, num_shards: int) -> list[str]:
    v = s.values
    argv = ["--model_name_or_path", v["MODEL_NAME"], "--dataset_name", v["DATASET_NAME"], "--split", v["SPLIT"],
            "--video_dir", v["VIDEO_DIR"], "--max_frames", v["MAX_FRAMES"], "--max_samples", v["MAX_SAMPLES"],
            "--batch_size", v["BATCH_SIZE"], "--output_file", str(output)]
    served = bool(v["SERVE"] or v["SERVE_URL"])
    if served:
        argv += ["--backend", "openai", "--base_url", v["SERVE_URL"] or SERVED_URL, "--api_model", v["MODEL_NAME"],
                 "--video_transport", video_transport()]
    else:
        if v["DTYPE"]:
            argv += ["--torch_dtype", v["DTYPE"]]
        if v.get("BACKEND") == "vllm":  # vLLM in-process: its own attention kernels
            argv += ["--backend", "vllm", "--tensor_parallel", v["TENSOR_PARALLEL"] or v["GPUS"] or "1"]
        elif v["ATTN_IMPL"]:
            argv += ["--attn_implementation", v["ATTN_IMPL"]]
    if s.thinking:
        argv.append("--thinking_mode")
    if s.audio:
        argv.append("--audio")
    if shard is not None:
        argv += ["--num_shards", str(num_shards), "--shard_id", str(shard)]
    if v["GPUS_PER_NODE"] and int(v["GPUS_PER_NODE"]) > 1 and not served and v.get("BACKEND") != "vllm":
        argv += ["--data_parallel", v["GPUS_PER_NODE"]]
    return argv + list(s.extra["INFER_ARGS"])


def build_steps(s: LaunchSettings, layout: RunLayout, mode: ShardMode) -> list[Step]:
    """The ordered stages of this run: each registry entry's steps, in the registry's order."""
    context = PlanContext(s, layout, mode)
    steps: list[Step] = []
    for e in registry.STAGES:
        if e.steps is not None and (e.in_shard_runs or not mode.shard_only):
            steps += e.steps(e, context)
    return steps


def demo_note(s: LaunchSettings) -> tuple[str, str, bool]:
    """(what runs, what the scores mean, random weights?) for the demo's banner and report note."""
    v = s.values
    model = v["MODEL_NAME"]
    random = s.demo_build_model or (Path(model, "config.json").is_file() and Path(model).name.startswith("tiny-"))
    who = f"a tiny RANDOM-WEIGHT model ({model})" if random else f"MODEL_NAME={model}"
    n = int(v["MAX_SAMPLES"])
    if v["DATASET_NAME"] == "demo":
        questions = (f"all {s.demo_questions} questions of the synthetic demo set" if n == -1 or n >= s.demo_questions
                     else f"the first {n} of the {s.demo_questions} synthetic demo questions")
    elif n == -1:
        questions = f"every question of DATASET_NAME={v['DATASET_NAME']}"
    else:
        questions = f"the first {n} question{'' if n == 1 else 's'} of DATASET_NAME={v['DATASET_NAME']}"
    from k9bench.report.model import model_display_name  # a venv path would fill five lines of every figure's stamp

    what = f"{who} answers {questions}, scored with EMBEDDING_MODEL={model_display_name(v['EMBEDDING_MODEL'])}"
    meaning = ("its answers are gibberish, so these scores are MEANINGLESS (they only show that the pipeline works)" if random
               else "a demo-sized run: these scores are not comparable to the paper's")
    return what, meaning, random


def check_steps(steps: list[Step], s: LaunchSettings) -> None:
    """Every stage's argv through its stage's own parser, before anything runs: a bad ``INFER_ARGS``,
    ``SCORE_ARGS`` or ``JUDGE_ARGS`` (or a clash with the launcher's own flags) is one line, exit 2."""
    from k9bench.pipeline.scripts import ArgsError, check_argv

    planned = {registry.entry(step.name).name for step in steps}
    probes = [e.probe(e, s) for e in registry.STAGES  # checked even while the stage is off (JUDGE_ARGS, the judge)
              if e.probe is not None and e.name not in planned and s.extra.get(e.args_variable)]
    for step in [*steps, *probes]:
        variable = registry.entry(step.name).args_variable
        if not variable:
            continue
        name = variable if s.extra.get(variable) else f"the launcher's arguments for {step.script}.py"
        try:
            check_argv(step.script, step.argv, name)
        except ArgsError as exc:
            raise LaunchError(str(exc)) from None


def describe_plan(steps: list[Step], stages: dict, reasons: dict[str, str | None]) -> list[str]:
    """One line per stage: ``inference   run: settings differ: max_new_tokens: 24 -> 5`` or ``... skip: done``."""
    lines = []
    for step in steps:
        why = reasons.get(step.name)
        outputs = ", ".join(str(p) for p in step.outputs)
        lines.append(f"  {step.name:<18} {'run ' if why else 'skip'}  {why if why else 'done with these settings and inputs'} -> {outputs}")
    return lines


def plan_reasons(steps: list[Step], stages: dict) -> dict[str, str | None]:
    """Why each stage will run (None: it will not): its own ``done()``, or an earlier stage it depends on runs."""
    reasons: dict[str, str | None] = {}
    for step in steps:
        own = stages[step.name].done()
        upstream = next((d for d in step.depends if reasons.get(d)), None)
        reasons[step.name] = own or (f"an earlier stage runs ({upstream})" if upstream else None)
    return reasons
