"""The plan: which stages one launcher run has, with what arguments, and why each will or will not run.

:func:`build_steps` turns the checked settings into the ordered :class:`~k9bench.pipeline.stages.Step`
list (download -> inference or its shards -> merge -> calculate -> evaluate -> judge -> report), each
with the exact argv its script gets. :func:`check_steps` parses every argv with its script's own parser
before anything runs (so a bad ``INFER_ARGS`` is refused up front); :func:`describe_plan` says for each
stage whether it runs and why (``--dry_run``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from k9bench.layout import RunLayout, checkpoint_path, shard_path, skipped_path
from k9bench.pipeline.env import LaunchError, LaunchSettings
from k9bench.pipeline.stages import Step

log = logging.getLogger("k9bench.pipeline")

SERVED_URL = "http://127.0.0.1:0/v1"
"""Stands for the URL of the server SERVE=vllm starts (known once it runs; not part of any record)."""

ARGS_OF = {"eval_video_llm": "INFER_ARGS", "evaluate_results": "SCORE_ARGS", "subjective_evals": "JUDGE_ARGS"}


@dataclass(frozen=True)
class ShardMode:
    """How this run shards inference (from NUM_SHARDS/SHARD_ID or the SLURM array: :mod:`k9bench.pipeline.slurm`)."""

    num_shards: int = 1
    shard_id: int | None = None
    """Only this shard (an array task, or SHARD_ID); None: every shard in turn."""
    finalize: bool = False
    """K9_FINALIZE=1: merge and score only (the array's merge job)."""
    in_array: bool = False


def files(layout: RunLayout) -> dict[str, Path]:
    raw, judge = layout.path("raw"), layout.path("judge")
    return {"raw": raw, "sim": layout.path("sim"), "eval": layout.path("eval"), "judge": judge,
            "judge_skipped": skipped_path(judge), "report_dir": Path(layout.out_dir) / f"report_{layout.tag}"}


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


def _inference_step(s: LaunchSettings, output: Path, name: str, shard: int | None, num_shards: int) -> Step:
    stem = output.name[:-5] if output.name.endswith(".json") else output.name
    return Step(name=name, script="eval_video_llm", argv=inference_argv(s, output, shard, num_shards), outputs=[output],
                replace_stale=True, served=bool(s.values["SERVE"]), companions=[checkpoint_path(output), output.with_name(stem + ".meta.json")])


def build_steps(s: LaunchSettings, layout: RunLayout, mode: ShardMode) -> list[Step]:
    """The ordered stages of this run."""
    v, f = s.values, files(layout)
    steps: list[Step] = []
    if not mode.finalize and v["MAX_FRAMES"] != "0":  # MAX_FRAMES=0 is text-only: no video is read, none is fetched
        download = ["--dataset_name", v["DATASET_NAME"], "--split", v["SPLIT"], "--output_dir", v["VIDEO_DIR"],
                    "--max_samples", v["MAX_SAMPLES"]]
        steps.append(Step(name="download", script="download_videos", argv=download,
                          outputs=[Path(v["VIDEO_DIR"]) / "download_manifest.json"],
                          incomplete_codes=() if v["DOWNLOAD_STRICT"] == "1" else (1,)))
    shards = [shard_path(f["raw"], mode.num_shards, i) for i in range(mode.num_shards)]
    if mode.num_shards == 1:
        if not mode.finalize:
            steps.append(_inference_step(s, f["raw"], "inference", None, 1))
    elif not mode.finalize:
        wanted = [mode.shard_id] if mode.shard_id is not None else range(mode.num_shards)
        for i in wanted:
            steps.append(_inference_step(s, shards[i], f"inference-shard{i}", i, mode.num_shards))
    if mode.num_shards > 1:
        if mode.shard_id is not None and not mode.finalize:
            return steps  # one shard only: the merge job (or K9_FINALIZE=1) does the rest
        steps.append(Step(name="merge", script="merge", argv=["--output_file", str(f["raw"]), "--expect_shards",
                                                               str(mode.num_shards), *map(str, shards)],
                          outputs=[f["raw"]], inputs=list(shards),
                          depends=tuple(f"inference-shard{i}" for i in range(mode.num_shards))))
    upstream = ("merge",) if mode.num_shards > 1 else ("inference",)
    steps.append(Step(name="calculate", script="evaluate_results", inputs=[f["raw"]], outputs=[f["sim"]], depends=upstream,
                      argv=["--mode", "calculate", "--input_file", str(f["raw"]), "--output_file", str(f["sim"]),
                            "--device", v["DEVICE"], "--embedding_model", v["EMBEDDING_MODEL"], "--batch_size",
                            v["EMBED_BATCH_SIZE"], *s.extra["SCORE_ARGS"]]))
    steps.append(Step(name="evaluate", script="evaluate_results", inputs=[f["sim"]], outputs=[f["eval"]], depends=("calculate",),
                      argv=["--mode", "evaluate", "--input_file", str(f["sim"]), "--output_file", str(f["eval"]),
                            "--threshold", v["THRESHOLD"]]))
    if s.judge_on:
        # --fail_on_skipped: entries left skipped end the run with exit 1 (after the report), and the next run retries them
        judge = ["--evaluations", str(f["eval"]), "--output", str(f["judge"]), "--skipped", str(f["judge_skipped"]),
                 "--judge_model", v["JUDGE_MODEL"], "--fail_on_skipped"]
        if v["JUDGE_BASE_URL"]:
            judge += ["--base_url", v["JUDGE_BASE_URL"]]
        stem = f["judge"].name[:-5]
        steps.append(Step(name="judge", script="subjective_evals", inputs=[f["eval"]], outputs=[f["judge"], f["judge_skipped"]],
                          # no depends: its own done() (its requests' content, issue 31) says when evaluate's rerun changed them
                          depends=(), argv=judge + list(s.extra["JUDGE_ARGS"]), incomplete_codes=(1,), replace_stale=True,
                          companions=[checkpoint_path(f["judge"]), f["judge"].with_name(stem + ".meta.json"),
                                      f["judge"].with_name(stem + ".summary.json")]))
    if v["REPORT"] == "1":
        steps.append(report_step(s, layout))
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


def report_step(s: LaunchSettings, layout: RunLayout) -> Step:
    """The report over this run and every run of the same model and questions at other MAX_FRAMES
    (found again just before it runs: :func:`refresh_report`)."""
    f = files(layout)
    step = Step(name="report", script="evaluate_results", argv=[], inputs=[f["eval"]], outputs=[f["report_dir"] / "report.md"],
                depends=("evaluate", "judge"))
    refresh_report(step, s, layout)
    return step


def refresh_report(step: Step, s: LaunchSettings, layout: RunLayout) -> int:
    """Fill in the report's inputs as they are now: the frame-budget runs beside this one, the judge
    file when there is one. Returns how many other runs are in the plot."""
    f = files(layout)
    evals = [f["eval"]]
    if f["eval"].is_file():
        try:
            from k9bench.report import frame_sweep_files

            evals = list(frame_sweep_files(f["eval"])) or evals
        except Exception as exc:  # noqa: BLE001 (any unreadable neighbour: report this run alone, and say so)
            log.info("step report: could not look for runs at other MAX_FRAMES in %s (%s); reporting this run alone",
                     layout.out_dir, exc)
    argv = ["--mode", "report", "--input_file", *map(str, evals), "--report_dir", str(f["report_dir"]),
            "--published", s.values["PUBLISHED"]]
    inputs = list(evals)
    if f["judge"].is_file() and f["judge"].stat().st_size:
        argv += ["--judge_files", str(f["judge"])]
        inputs.append(f["judge"])
    if s.demo:
        what, meaning, _ = demo_note(s)
        argv += ["--note", f"DEMO run: {what}; {meaning}."]
    step.argv, step.inputs = argv, inputs
    return len(evals) - 1


def check_steps(steps: list[Step], s: LaunchSettings) -> None:
    """Every stage's argv through its script's own parser, before anything runs: a bad ``INFER_ARGS``,
    ``SCORE_ARGS`` or ``JUDGE_ARGS`` (or a clash with the launcher's own flags) is one line, exit 2."""
    from k9bench.pipeline.scripts import ArgsError, check_argv

    if s.extra["JUDGE_ARGS"] and not any(step.script == "subjective_evals" for step in steps):
        steps = [*steps, Step(name="judge", script="subjective_evals", outputs=[],
                              argv=["--evaluations", "eval.json", *s.extra["JUDGE_ARGS"]])]  # checked even while the judge is off
    for step in steps:
        if step.script not in ARGS_OF:
            continue
        variable = ARGS_OF[step.script] if (step.script != "evaluate_results" or step.name == "calculate") else "SCORE_ARGS"
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
