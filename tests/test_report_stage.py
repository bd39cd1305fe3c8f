"""The report behind the Stage contract: an unchanged rerun runs nothing, a changed setting or input
reruns it, the stage block is in report.json, the launcher's parser takes the report's argv."""

from __future__ import annotations

import json

import pytest

from k9bench.report import ReportStage, build_parser, config_from_argv, run_report
from k9bench.stage import output_lock, run_stage
from tests.test_report import make_eval, make_judge


@pytest.fixture
def inputs(tmp_path):
    evals = [make_eval(tmp_path / f"eval_m{i}_mf32_n20.json", model=f"m{i}") for i in (1, 2)]
    judge = make_judge(tmp_path / "judge_m1_mf32_n20.json")
    return evals, judge


def argv_for(tmp_path, evals, judge, *extra: str) -> list[str]:
    """The argv the launcher passes (as evaluate_results.py --mode report takes it)."""
    return ["--mode", "report", "--input_file", *map(str, evals), "--judge_files", str(judge),
            "--report_dir", str(tmp_path / "rep"), "--published", "matching", "-q", *extra]


def test_unchanged_rerun_is_done_and_changes_rerun(tmp_path, inputs):
    evals, judge = inputs
    stage = ReportStage(config_from_argv(argv_for(tmp_path, evals, judge)))
    assert "missing" in stage.done()
    assert run_stage(stage) == 0
    assert stage.done() is None
    assert ReportStage(config_from_argv(argv_for(tmp_path, evals, judge))).done() is None  # a new process would say the same
    block = json.loads((tmp_path / "rep" / "report.json").read_text())["stage"]
    assert block["name"] == "report" and set(block["inputs"]) == {*map(str, evals), str(judge)}
    assert block["fingerprint"]["published"] == "matching"

    noted = ReportStage(config_from_argv(argv_for(tmp_path, evals, judge, "--note", "DEMO")))
    assert noted.done().startswith("settings differ")
    relabelled = ReportStage(config_from_argv(argv_for(tmp_path, evals, judge, "--labels", "a", "b")))
    assert relabelled.done().startswith("settings differ")

    # the judge's skipped list appears beside it: the report shows it, so it must be rebuilt
    (tmp_path / "judge_m1_mf32_n20_skipped.json").write_text(json.dumps([{"idx": 7, "error": "no dict", "timestamp": "t", "kind": "parse_error"}]))
    assert "judge_m1_mf32_n20_skipped.json" in stage.done()
    assert run_stage(stage) == 0 and stage.done() is None
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "skipped idx 7: parse_error: no dict" in md

    make_eval(evals[0], model="m1", per_cat=5)  # the same file, other content
    assert stage.done() == f"input {evals[0]} changed"
    evals[1].unlink()
    assert stage.done() == f"input {evals[1]} is missing"


def test_a_second_report_on_the_same_folder_refuses_at_once(tmp_path, inputs, caplog):
    evals, judge = inputs
    settings = config_from_argv(argv_for(tmp_path, evals, judge))
    with output_lock(tmp_path / "rep", flag="--report_dir"):
        assert run_report(settings) == 2
    assert "--report_dir" in caplog.text and "is being written by pid" in caplog.text
    assert not (tmp_path / "rep" / "report.json").exists()
    assert run_report(settings) == 0  # the lock went with its holder


def test_parser_takes_the_report_flags_only(tmp_path, inputs):
    evals, judge = inputs
    settings = config_from_argv(argv_for(tmp_path, evals, judge, "--subset", str(evals[0])))
    assert settings.inputs == [str(p) for p in evals] and settings.subset == str(evals[0])
    with pytest.raises(SystemExit) as exc:
        config_from_argv(["--input_file", "x.json", "--published", "some"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--input_file", "x.json", "--threshold", "0.3"])  # a scoring flag, not the report's


def test_frame_sweep_command_lists_the_curve(tmp_path, capsys):
    """``python -m k9bench.report --frame_sweep EVAL`` (the launcher's frame-budget inputs), one per line."""
    from k9bench.report.__main__ import main

    files = [make_eval(tmp_path / f"eval_m_mf{f}_n20.json", model="m", frames=f) for f in (4, 8)]
    assert main(["--frame_sweep", str(files[1])]) == 0
    assert capsys.readouterr().out.splitlines() == [str(files[1]), str(files[0])]
    (tmp_path / "eval_bad_mf4_n1.json").write_text("{")
    assert main(["--frame_sweep", str(tmp_path / "eval_bad_mf4_n1.json")]) == 2
    assert capsys.readouterr().err.startswith("report: ")
