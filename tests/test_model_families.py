"""k9bench.models.families: the one model-family table, each of its readers, and a family added as one row."""

from __future__ import annotations

import ast
import dataclasses
import json
import logging
from pathlib import Path

import pytest

from k9bench.models import families
from k9bench.models.families import FAMILIES, FRAME_RULES, Family

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "k9bench" / "models" / "families.py"


def _fake(name: str, **attrs):
    """An instance of a class called ``name`` with ``attrs`` (the readers look only at types and attributes)."""
    return type(name, (), dict(attrs))()


QWEN_GRID = _fake("Qwen2VLVideoProcessor", patch_size=14, merge_size=2)


def _family_strings() -> set[str]:
    """Every string that names a family fact: model types, family names and spellings, processor classes."""
    out: set[str] = set()
    for row in FAMILIES.values():
        out.update(row.model_types, row.processors, row.video_processors, row.tiny_aliases, {row.name})
    return out


# ------------------------------------------------------------------ the table


def test_every_row_is_well_formed_and_no_model_type_has_two_rows():
    seen: dict[str, str] = {}
    for name, row in FAMILIES.items():
        assert row.name == name and row.frame_rule in FRAME_RULES and row.model_types, name
        for model_type in row.model_types:
            assert model_type not in seen, f"{model_type} in rows {seen.get(model_type)} and {name}"
            seen[model_type] = name
        if row.frame_rule == "fixed_size":  # the rule needs a video processor known to resize to one size
            assert row.video_processors and row.frame_patch, name
    spellings = [s for row in FAMILIES.values() for s in (row.name, *row.tiny_aliases)]
    assert len(spellings) == len(set(spellings))


def test_every_tiny_builder_named_in_the_table_exists():
    import importlib
    import inspect

    for row in FAMILIES.values():
        if row.tiny_builder is None:
            continue
        module, _, function = row.tiny_builder.partition(":")
        builder = getattr(importlib.import_module(module), function)
        params = inspect.signature(builder).parameters
        assert "path" in params and "seed" in params, row.tiny_builder
        assert ("head_dim" in params) == row.tiny_head_dim, row.tiny_builder


def test_the_table_imports_nothing_heavy():
    tree = ast.parse(TABLE.read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "importlib", "dataclasses", "typing"}, imported


def test_no_second_list_of_model_families_in_the_package():
    """No module but the table spells a model type, a family name or a family's processor class as a string."""
    names = _family_strings()
    found = []
    for path in sorted((ROOT / "k9bench").rglob("*.py")):
        if path == TABLE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not found, "family facts outside k9bench/models/families.py:\n" + "\n".join(found)


def test_lookups():
    assert families.for_model_type("qwen2_5_omni_thinker") is FAMILIES["qwen2_5_omni"]
    assert families.for_model_type("llava") is None and families.for_model_type(None) is None
    assert families.for_processor("InternVLProcessor") is FAMILIES["internvl"]
    assert families.for_processor("AnyProcessor", "InternVLVideoProcessor") is FAMILIES["internvl"]
    assert families.for_processor("AnyProcessor", "AnyVideoProcessor") is None
    assert families.hears_audio("qwen3_omni_moe") and not families.hears_audio("qwen3_vl") and not families.hears_audio(None)
    with pytest.raises(ValueError, match="unknown family 'llava'; choose one of"):
        families.tiny_builder("llava")


# ------------------------------------------------------------------ one test per reader


def test_frame_policy_reads_the_row_by_model_type_before_the_processor_name():
    from k9bench.video.policy import policy_for

    plain = policy_for(_fake("AnyNameProcessor", video_processor=QWEN_GRID))
    assert plain.family is None and not plain.fps_keyword and plain.rule == "qwen_vl_rules"
    omni = policy_for(_fake("AnyNameProcessor", video_processor=QWEN_GRID), model_type="qwen2_5_omni_thinker")
    assert omni.family == "qwen2_5_omni" and omni.fps_keyword and omni.rule == "qwen_vl_rules"
    by_name = policy_for(_fake("Qwen3OmniMoeProcessor", video_processor=QWEN_GRID))
    assert by_name.family == "qwen3_omni" and by_name.fps_keyword


def test_frame_policy_takes_a_fixed_size_only_from_a_fixed_size_family(caplog):
    from k9bench.video.policy import policy_for

    vp = _fake("InternVLVideoProcessor", size={"height": 448, "width": 448})
    fixed = policy_for(_fake("P", video_processor=vp))
    assert (fixed.rule, fixed.frame_size, fixed.recommended_max_frames, fixed.frame_patch) == ("fixed_size", (448, 448), 32, (14, 1))
    # a row saying qwen_vl_rules wins over a video processor's class name, and without its grid the processor resizes
    with caplog.at_level(logging.WARNING, logger="k9bench.video.policy"):
        other = policy_for(_fake("P", video_processor=vp), model_type="qwen3_vl")
    assert other.rule == "processor_resizes" and other.family == "qwen3_vl" and "no known frame rule" in caplog.text


def _config(tmp_path: Path, model_type: str, audio: bool):
    from k9bench.inference.settings import FrameSettings, ModelSettings, RunConfig

    folder = tmp_path / model_type
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}), encoding="utf-8")
    return RunConfig(model=ModelSettings(model_name_or_path=str(folder)), frames=FrameSettings(audio=audio))


def test_planning_refuses_audio_for_a_family_that_does_not_hear(tmp_path):
    from k9bench.inference.planning import UsageError, check_model_config

    with pytest.raises(UsageError, match=r"'qwen3_vl' model .*\(Qwen2\.5-Omni thinker, Qwen3-Omni thinker do\)"):
        check_model_config(_config(tmp_path, "qwen3_vl", audio=True))
    assert check_model_config(_config(tmp_path, "qwen3_omni_moe_thinker", audio=True)) == {"model_type": "qwen3_omni_moe_thinker"}
    assert check_model_config(_config(tmp_path, "internvl", audio=False)) == {"model_type": "internvl"}


def test_tiny_model_builder_reads_its_families_from_the_table(tmp_path, capsys):
    from k9bench.tiny_model import build_tiny, head_dim_families, main

    assert head_dim_families() == ("qwen3_vl",)
    with pytest.raises(ValueError, match="--head_dim is only for qwen3_vl, not internvl"):
        build_tiny("internvl", tmp_path / "x", head_dim=64)
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert all(name in text for name in families.tiny_names())


def test_launcher_demo_family_is_the_tables():
    from k9bench.pipeline.env import LaunchSettings

    assert families.DEMO_FAMILY in FAMILIES and FAMILIES[families.DEMO_AUDIO_FAMILY].audio
    assert LaunchSettings.__dataclass_fields__["demo_family"].default == families.DEMO_FAMILY


# ------------------------------------------------------------------ a family added as one row


def _moved(monkeypatch) -> Family:
    """The Qwen2.5-VL row taken out and added again under another name, as a new family would be: one row."""
    old = FAMILIES["qwen2_5_vl"]
    new = dataclasses.replace(old, name="qwen25vl_new", label="Qwen2.5-VL (a new row)", tiny_aliases=("q25new",))
    table = {k: v for k, v in FAMILIES.items() if k != "qwen2_5_vl"}
    monkeypatch.setattr(families, "FAMILIES", table)
    from k9bench.video.policy import policy_for

    processor = _fake("Qwen2_5_VLProcessor", video_processor=QWEN_GRID)
    # without the row: no reader knows the family
    assert policy_for(processor, model_type="qwen2_5_vl").family is None
    assert "qwen25vl_new" not in families.tiny_names()
    table["qwen25vl_new"] = new
    # with it: every reader does
    assert policy_for(processor, model_type="qwen2_5_vl").family == "qwen25vl_new"
    assert families.tiny_names()["q25new"] == "qwen25vl_new"
    return new


def test_a_family_is_one_row(monkeypatch):
    _moved(monkeypatch)


@pytest.mark.slow
def test_a_family_added_as_one_row_builds_loads_and_gets_its_policy(monkeypatch, tmp_path, capsys):
    """The row's tiny model is built by ``python -m k9bench.tiny_model --family`` under the new name, and the
    processor it writes is recognised by that row."""
    from transformers import AutoProcessor

    from k9bench.tiny_model import main
    from k9bench.video.policy import policy_for

    _moved(monkeypatch)
    assert main([str(tmp_path / "m"), "--family", "q25new"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "m")
    model_type = json.loads((tmp_path / "m" / "config.json").read_text(encoding="utf-8"))["model_type"]
    policy = policy_for(AutoProcessor.from_pretrained(str(tmp_path / "m")), model_type=model_type)
    assert (policy.family, policy.rule, policy.image_patch_size) == ("qwen25vl_new", "qwen_vl_rules", 14)
