"""The plan: which stages one launcher run has, with what arguments, and why each will or will not run.

:func:`build_steps` turns the checked settings into the ordered :class:`~k9bench.pipeline.stages.Step`
list by asking each entry of the stage registry (:data:`k9bench.pipeline.registry.STAGES`, in its order)
for its steps; no stage is named here. :func:`check_steps` builds every stage's settings as its run will
before anything runs (so a bad ``INFER_ARGS`` is refused up front); :func:`describe_plan` says for each
stage whether it runs and why (``--dry_run``). :func:`check_settings` runs each planned entry's preflight
checks (:mod:`k9bench.pipeline.preflight`), :func:`prepare_demo` each entry's preparation (the demo's model
and videos, :mod:`k9bench.pipeline.prepare`).
"""

from __future__ import annotations

from typing import Callable

from k9bench.layout import RunLayout
from k9bench.pipeline import registry
from k9bench.pipeline.env import LaunchError, LaunchSettings
from k9bench.pipeline.stages import PlanContext, ShardMode, Step


def build_steps(s: LaunchSettings, layout: RunLayout, mode: ShardMode) -> list[Step]:
    """The ordered stages of this run: each registry entry's steps, in the registry's order."""
    context = PlanContext(s, layout, mode)
    steps: list[Step] = []
    for e in registry.STAGES:
        if e.steps is not None and (e.in_shard_runs or not mode.shard_only):
            steps += e.steps(e, context)
    return steps


def check_steps(steps: list[Step], s: LaunchSettings) -> None:
    """Every stage's settings built as its run will build them (its values and ``*_ARGS`` through its own parser),
    before anything runs: a bad ``INFER_ARGS``, ``SCORE_ARGS`` or ``JUDGE_ARGS`` (or a clash with the launcher's own
    values) is one line, exit 2."""
    from k9bench.pipeline.scripts import ArgsError, check_step

    planned = {registry.entry(step.name).name for step in steps}
    probes = [e.probe(e, s) for e in registry.STAGES  # checked even while the stage is off (JUDGE_ARGS, the judge)
              if e.probe is not None and e.name not in planned and s.extra.get(e.args_variable)]
    for step in [*steps, *probes]:
        variable = registry.entry(step.name).args_variable
        if not variable:
            continue
        name = variable if s.extra.get(variable) else f"the launcher's arguments for {step.script}.py"
        try:
            check_step(step, name)
        except ArgsError as exc:
            raise LaunchError(_in_launcher_words(str(exc), step, s)) from None


def _in_launcher_words(message: str, step: Step, s: LaunchSettings) -> str:
    """A stage's refusal of a flag the launcher fed from one of its variables, naming that variable and its value
    (``EMBED_BATCH_SIZE=100000: must be at most 65536``), not the flag the user never typed (issue 40 item 3)."""
    import re

    entry = registry.entry(step.name)
    typed = {arg.split("=", 1)[0] for arg in s.extra.get(entry.args_variable) or ()}
    for variable, flag in entry.variables.items():
        found = re.search(rf"{re.escape(flag)}(?![\w-])[:\s]*", message)
        if found and flag not in typed and s.values.get(variable):
            return f"{variable}={s.values[variable]}: {message[found.end():]}"
    return message


def check_settings(s: LaunchSettings, steps: list[Step], env: dict) -> None:
    """The preflight's checks that read only the settings (no stage object needed, :mod:`k9bench.pipeline.preflight`):
    those of every registry entry in the plan (:attr:`~k9bench.pipeline.registry.StageEntry.checks`), each once, in
    the registry's order; then the outputs."""
    planned = {registry.entry(step.name).name for step in steps}
    done: list = []
    for e in registry.STAGES:
        for check in (e.checks if e.name in planned else ()):
            if check not in done:
                done.append(check)
                check(s, env)
    check_outputs(steps)


def check_outputs(steps: list[Step]) -> None:
    """Every stage's outputs can be written (nothing is created); a refusal names the entry's
    :attr:`~k9bench.pipeline.registry.StageEntry.writes_to` variable."""
    from k9bench.pipeline.preflight import PreflightError
    from k9bench.stage import OutputError, check_output

    for step in steps:
        for out in step.outputs:
            try:
                check_output(out, flag=f"{registry.entry(step.name).writes_to} (step {step.name} writes)", inputs=step.inputs)
            except OutputError as exc:
                raise PreflightError(str(exc)) from None


def run_prepared(step: Step) -> None:
    """Run a preparation step's Stage (:func:`k9bench.stage.run_stage`, its lines prefixed with its name);
    a non-zero exit is :class:`~k9bench.pipeline.slurm.StepFailed`."""
    from k9bench.pipeline.report_lines import step_output
    from k9bench.pipeline.slurm import StepFailed
    from k9bench.stage import run_stage

    with step_output(step.name):
        code = run_stage(registry.make_stage(step))
    if code != 0:
        raise StepFailed(code, f"step {step.name} failed (exit {code})")


def prepare_demo(settings: LaunchSettings, *, say: Callable[[str], None], enter: Callable[[str], None] = lambda name: None,
                 run: Callable[[Step], None] = run_prepared, dry_run: bool = False) -> None:
    """Every registry entry's :attr:`~k9bench.pipeline.registry.StageEntry.prepare`, in order (DEMO=1 only);
    with ``dry_run`` each says what it would make and makes nothing."""
    if not settings.demo:
        return
    from k9bench.pipeline.prepare import Preparing

    for e in registry.STAGES:
        if e.prepare is not None:
            e.prepare(e, settings, Preparing(say, enter, run, dry_run=dry_run))


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
