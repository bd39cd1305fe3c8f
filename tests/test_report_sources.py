"""What the report says about where a run's answers and scores came from: the inference server's block
(issue 21), reference prompts confirmed by hash (issue 24), the judge's skipped entries (issue 25)."""

from __future__ import annotations

import json
from pathlib import Path

from k9bench.data import published
from k9bench.report import build_report, load_judge, load_run, write_report
from tests.test_report import make_judge
from tests.test_report_comparable import PROMPT_HASH, inference_block, write_eval

JUDGE_HASH = "ef" * 32


def served(tmp_path: Path, root: str) -> Path:
    block = inference_block()
    block["backend"] = {"name": "openai", "server": {
        "engine": "vllm", "version": "0.32.0", "served_model": "Qwen/Qwen3-VL-32B-Instruct", "root": root, "max_model_len": 32768,
        "owned_by": "vllm", "models": ["Qwen/Qwen3-VL-32B-Instruct"], "system_fingerprints": ["vllm-0.32.0-abc"],
        "read_from": ["/v1/models", "/version"]}}
    path = write_eval(tmp_path / f"eval_{Path(root).name}.json", model="Qwen3-VL-32B-Instruct", inference=block)
    data = json.loads(path.read_text())
    data["input_meta"]["model_name_or_path"] = "Qwen/Qwen3-VL-32B-Instruct"
    path.write_text(json.dumps(data))
    return path


def test_server_block_is_shown_and_another_checkpoint_is_not_comparable(tmp_path):
    fp8 = served(tmp_path, "Qwen/Qwen3-VL-32B-Instruct-FP8")
    same = served(tmp_path, "/models/Qwen/Qwen3-VL-32B-Instruct")
    run = load_run(fp8)
    assert any("served checkpoint Qwen/Qwen3-VL-32B-Instruct-FP8, not Qwen/Qwen3-VL-32B-Instruct" in d for d in run.settings.differences)
    assert not any("served checkpoint" in d for d in load_run(same).settings.differences)
    md = Path(write_report(build_report([str(fp8), str(same)], published="matching"), tmp_path / "rep")["markdown"]).read_text()
    settings = md.split("## Run settings")[1].split("\n## ")[0]
    assert "| Server |" in next(ln for ln in settings.splitlines() if ln.startswith("| Model |"))
    assert "engine vllm; version 0.32.0; served_model Qwen/Qwen3-VL-32B-Instruct; root Qwen/Qwen3-VL-32B-Instruct-FP8; " \
           "max_model_len 32768; system_fingerprints vllm-0.32.0-abc" in settings
    saved = json.loads((tmp_path / "rep" / "report.json").read_text())["runs"][0]["settings"]
    assert saved["server"]["root"] == "Qwen/Qwen3-VL-32B-Instruct-FP8" and saved["standing"] == "not comparable"


def test_a_local_run_has_no_server_column(tmp_path):
    md = Path(write_report(build_report([str(write_eval(tmp_path / "eval_x.json"))]), tmp_path / "rep")["markdown"]).read_text()
    assert "| Server |" not in md


def test_reference_prompts_confirmed_by_hash(tmp_path, monkeypatch):
    """The system prompt (raw file) and the judge prompt (the judge's meta sidecar) against published's hashes."""
    monkeypatch.setattr(published, "REFERENCE_SYSTEM_PROMPT_SHA256", PROMPT_HASH, raising=False)
    monkeypatch.setattr(published, "REFERENCE_JUDGE_PROMPT_SHA256", JUDGE_HASH, raising=False)
    path = write_eval(tmp_path / "eval_Qwen3-VL-8B-Instruct_mf32_n10.json", inference=inference_block(source="ref_system.txt"))
    judge = make_judge(tmp_path / "judge_Qwen3-VL-8B-Instruct_mf32_n10.json")
    meta = Path(f"{judge}.meta.json")
    meta.write_text(json.dumps({"judge": {"model": "gpt-4o", "prompt_source": "ref_judge.txt", "prompt_sha256": JUDGE_HASH}}))
    assert load_run(path).settings.prompts_confirmed and load_judge(judge).prompt["reference"]
    md = Path(write_report(build_report([str(path)], [str(judge)]), tmp_path / "rep")["markdown"]).read_text()
    assert "system_prompt: reference prompts (confirmed): ref_system.txt" in md
    assert "judge gpt-4o, prompt: reference prompts (confirmed): ref_judge.txt" in md
    # one character off: another hash, not confirmed
    meta.write_text(json.dumps({"judge": {"model": "gpt-4o", "prompt_source": "ref_judge.txt", "prompt_sha256": "00" * 32}}))
    monkeypatch.setattr(published, "REFERENCE_SYSTEM_PROMPT_SHA256", "11" * 32, raising=False)
    assert not load_run(path).settings.prompts_confirmed and not load_judge(judge).prompt["reference"]
    md = Path(write_report(build_report([str(path)], [str(judge)]), tmp_path / "rep")["markdown"]).read_text()
    assert "(confirmed):" not in md


def test_writers_confirmation_is_read(tmp_path, monkeypatch):
    """eval_video_llm.py checks the text itself (a prompt file ending in one newline matches the reference's
    hash after normalisation, its raw hash does not) and records ``reference_prompts``."""
    monkeypatch.setattr(published, "REFERENCE_SYSTEM_PROMPT_SHA256", PROMPT_HASH, raising=False)
    block = inference_block(source="ref_system.txt")
    block["prompt"]["system_prompt_sha256"] = "99" * 32
    block["prompt"]["reference_prompts"] = published.CONFIRMED_PROMPTS
    assert load_run(write_eval(tmp_path / "eval_a.json", inference=block)).settings.prompts_confirmed
    block["prompt"]["reference_prompts"] = "unconfirmed"
    assert not load_run(write_eval(tmp_path / "eval_b.json", inference=block)).settings.prompts_confirmed


def test_judge_prompt_confirmed_as_the_judge_records_it(tmp_path, monkeypatch):
    """The judge checks its template with published.is_reference_prompt (the reference hash covers the template
    filled with its placeholders' names, so the raw sha256 never equals it) and records reference_prompt /
    prompt_status in the meta sidecar: the report reads that, not the raw hash (a stand-in template here)."""
    import hashlib

    from k9bench.judge.settings import JudgeSettings

    stand_in = "Judge.\nQ: {question}\nRight: {correct_answer}\nGiven: {model_output}\nReply {{'Logic': X}}\n"  # literal braces
    filled = stand_in.format(question="{question}", correct_answer="{correct_answer}", model_output="{model_output}")
    monkeypatch.setattr(published, "REFERENCE_JUDGE_PROMPT_SHA256", hashlib.sha256(filled.encode()).hexdigest(), raising=False)
    judge = make_judge(tmp_path / "judge_m_mf32_n20.json", n=2)
    meta = Path(f"{judge}.meta.json")
    for template, confirmed in ((stand_in, True), (stand_in.replace("Judge.", "Judge!"), False)):
        record = JudgeSettings(template=template, prompt_source="ref_judge.txt").record()
        assert record["prompt_sha256"] != published.REFERENCE_JUDGE_PROMPT_SHA256  # the raw hash never matches
        meta.write_text(json.dumps({"judge": {"model": "gpt-4o", **record}}))
        assert load_judge(judge).prompt["reference"] is confirmed
        md = Path(write_report(build_report([str(write_eval(tmp_path / "eval_m_mf32_n20.json"))], [str(judge)]),
                               tmp_path / "rep")["markdown"]).read_text()
        assert ("prompt: reference prompts (confirmed): ref_judge.txt" in md) is confirmed


def test_an_eval_file_scored_on_a_subset_says_so(tmp_path):
    path = write_eval(tmp_path / "eval_x.json")
    data = json.loads(path.read_text())
    data["subset"] = {"path": "s.json", "description": "the 10 questions whose videos all 2 runs had", "sha256": "12" * 32,
                      "count": 10, "kept": 10, "dropped": 2, "absent": 0}
    path.write_text(json.dumps(data))
    md = Path(write_report(build_report([str(path)]), tmp_path / "rep")["markdown"]).read_text()
    assert "| 10 (subset: the 10 questions whose videos all 2 runs had (sha256 121212121212…)) |" in md


def test_judge_section_lists_skipped_entries(tmp_path):
    judge = make_judge(tmp_path / "judge_m_mf32_n20.json", n=2)
    skipped = [{"idx": 100 + i, "error": f"judge call failed (connection): refused {i}", "timestamp": "t", "kind": "api_error"}
               for i in range(25)]
    (tmp_path / "judge_m_mf32_n20_skipped.json").write_text(json.dumps(skipped))
    summary = load_judge(judge)
    assert [s["idx"] for s in summary.skipped] == list(range(100, 125))
    report = build_report([str(write_eval(tmp_path / "eval_m_mf32_n20.json"))], [str(judge)])
    md = Path(write_report(report, tmp_path / "rep")["markdown"]).read_text()
    part = md.split("## Judge scores")[1]
    assert "2 entries scored, 25 skipped" in part
    assert "  - skipped idx 100: api_error: judge call failed (connection): refused 0" in part
    assert "… and 5 more in" in part and "skipped idx 120" not in part
    empty = make_judge(tmp_path / "judge_none.json", n=0)
    (tmp_path / "judge_none_skipped.json").write_text(json.dumps(skipped[:3]))
    md = Path(write_report(build_report([str(tmp_path / "eval_m_mf32_n20.json")], [str(empty)]), tmp_path / "rep2")["markdown"]).read_text()
    assert "0 entries scored, 3 skipped" in md and "skipped idx 102" in md  # an empty judge table still says why
