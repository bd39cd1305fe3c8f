"""The launcher's stage registry (issue 28): every plan step is an entry, each built from its package
module, never from the root scripts, and without touching sys.path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from k9bench.pipeline import registry

REPO = Path(__file__).resolve().parent.parent
PIPELINE = REPO / "k9bench" / "pipeline"


def test_every_entry_names_a_package_module_with_a_parser_or_a_main():
    import importlib

    for entry in registry.STAGES:
        assert entry.module.startswith("k9bench."), entry
        module = importlib.import_module(entry.module)
        assert hasattr(module, "main") or (hasattr(module, "config_from_argv") and entry.runs and hasattr(module, entry.runs)), entry
        assert all(f in registry.BY_NAME for f in entry.follows), entry
        assert 0 in entry.exits, entry


def test_every_step_of_a_plan_is_a_registry_entry_and_built_from_it(tmp_path):
    from k9bench.layout import RunLayout
    from k9bench.pipeline.env import read_settings
    from k9bench.pipeline.plan import ShardMode, build_steps
    from k9bench.pipeline.stages import make_stage

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    env = {"MODEL_NAME": str(model), "DATASET_NAME": "demo", "EMBEDDING_MODEL": str(model), "OUT_DIR": str(tmp_path / "o"),
           "VIDEO_DIR": str(tmp_path / "v"), "JUDGE_BASE_URL": "http://127.0.0.1:9/v1", "DEVICE": "cpu"}
    s = read_settings(env, REPO)
    layout = RunLayout(out_dir=s["OUT_DIR"], model=s["MODEL_NAME"], max_frames=4, max_samples=-1, audio=False)
    names = set()
    for mode in (ShardMode(), ShardMode(num_shards=2)):
        for step in build_steps(s, layout, mode):
            entry = registry.entry(step.name)
            assert entry.script == step.script, step.name
            names.add(entry.name)
            stage = make_stage(step)
            assert type(stage).__module__.startswith("k9bench."), step.name
    assert names == {"download", "inference", "merge", "calculate", "evaluate", "judge", "report"}


@pytest.mark.parametrize("script", sorted({e.script for e in registry.STAGES}))
def test_each_script_runs_from_its_package_module(script):
    main = registry.script_main(script)
    assert callable(main) and main.__module__.startswith("k9bench."), (script, main.__module__)


def test_the_pipeline_never_imports_the_root_scripts_nor_touches_sys_path():
    text = {p.name: p.read_text(encoding="utf-8") for p in PIPELINE.glob("*.py")}
    for name, source in text.items():
        code = "\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith("#"))
        assert "sys.path.insert" not in code and "sys.path.append" not in code, name
        assert not re.search(r"import_module\((['\"])(eval_video_llm|evaluate_results|subjective_evals|download_videos)\1", code), name
