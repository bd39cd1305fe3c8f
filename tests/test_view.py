"""The results page without a browser: its data (questions, answers, similarities, judge scores, failure
class, thumbnails of the recorded frames), across runs, the report stage's index.html, bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k9bench.view.__main__ import main
from tests.view_fakes import DEMO_NOTE, demo_eval, demo_judge, frame_indices

TAG = "tiny-m_mf4_n-1"


def page_data(page: Path) -> dict:
    text = page.read_text(encoding="utf-8")
    start = text.index('<script type="application/json" id="k9data">') + len('<script type="application/json" id="k9data">')
    return json.loads(text[start:text.index("</script>", start)].replace("<\\/", "</"))


@pytest.fixture(scope="module")
def demo_files(tmp_path_factory, demo_video_dir):
    tmp = tmp_path_factory.mktemp("view")
    indices = frame_indices(demo_video_dir)
    ev = demo_eval(tmp / f"eval_{TAG}.json", demo_video_dir, failed=(11,), indices=indices)
    other = demo_eval(tmp / "eval_other-m_mf4_n-1.json", demo_video_dir, model="other-m", shift=-1, indices=indices)
    judge = demo_judge(tmp / f"judge_{TAG}.json")
    return tmp, ev, other, judge, indices


def test_demo_page_holds_every_question_with_its_frames(demo_files, tmp_path, capsys):
    tmp, ev, _, judge, indices = demo_files
    assert main([str(ev), str(judge), "--output_dir", str(tmp_path / "page"), "--note", DEMO_NOTE, "-q"]) == 0
    page = Path(capsys.readouterr().out.strip())
    assert page == tmp_path / "page" / "index.html"
    html = page.read_text()
    assert "<script src" not in html and "<link" not in html and "http://" not in html  # self-contained
    data = page_data(page)
    assert [q["i"] for q in data["questions"]] == list(range(12))
    assert data["notes"] == [DEMO_NOTE]
    run = data["runs"][0]
    assert run["label"] == "tiny-m" and run["stage"] == "eval" and run["threshold"] == 0.5 and run["mark"]
    for q in data["questions"]:
        assert len(q["o"]) == 5 and not q["o"][0].startswith("A.") and q["g"] in "ABCDE"
        answer = q["r"][0]
        if q["i"] == 11:
            assert answer["v"] == "failed" and answer["f"] == "decode_error" and "x" not in answer
        else:
            assert len(answer["x"]) == 5 and answer["v"] in ("correct", "wrong") and answer["e"].startswith("closest option")
        assert ("j" in answer) == (q["i"] in (0, 1, 2))
        # the demo's videos are made here: the link is the local file, not the YouTube address of its rows
        assert q["u"] == "" and q["file"].endswith(f"{q['s']}.mp4") and q["lf"] == Path(q["file"]).resolve().as_uri()
        assert answer["p"] == (1 if answer["v"] == "correct" else 0)  # failed counts as wrong in every comparison
    assert data["questions"][0]["r"][0]["j"] == [7, 6, 5, 8, 6] and data["questions"][0]["r"][0]["jr"] == "judge reason for 0"
    # a strip per video, of frames the model saw (their recorded source indices), each a JPEG on disk
    assert set(data["thumbs"]) == set(indices)
    total = 0
    for scene, strips in data["thumbs"].items():
        assert len(strips) == 1 and strips[0]["runs"] == [0]
        strip = strips[0]["f"]
        assert 1 <= len(strip) <= 8
        assert all(index in indices[scene][0] for _, index, _ in strip)
        for name, _, _ in strip:
            blob = (tmp_path / "page" / "frames" / name).read_bytes()
            assert blob[:2] == b"\xff\xd8"
            total += len(blob)
    assert data["frames_bytes"] == total


def test_thumbnails_are_bounded_and_can_be_turned_off(demo_files, tmp_path):
    tmp, ev, _, _, _ = demo_files
    assert main([str(ev), "--output_dir", str(tmp_path / "one"), "--thumbnails", "1", "-q"]) == 0
    data = page_data(tmp_path / "one" / "index.html")
    assert len(data["thumbs"]) == 1 and "first 1 of 3 videos" in data["thumb_notes"][0]
    assert main([str(ev), "--output_dir", str(tmp_path / "none"), "--thumbnails", "0", "-q"]) == 0
    data = page_data(tmp_path / "none" / "index.html")
    assert data["thumbs"] == {} and data["frames_bytes"] == 0 and not (tmp_path / "none" / "frames").exists()
    # a rebuild into the same folder leaves only its own frames there
    assert main([str(ev), "--output_dir", str(tmp_path / "one"), "--thumbnails", "0", "-q"]) == 0
    assert list((tmp_path / "one" / "frames").iterdir()) == []


def test_frames_other_than_the_recorded_ones_are_never_shown(demo_files, demo_video_dir, tmp_path):
    tmp, _, _, _, indices = demo_files
    wrong = {scene: ([i + 1 for i in idx], d) for scene, (idx, d) in indices.items()}
    ev = demo_eval(tmp_path / f"eval_{TAG}.json", demo_video_dir, indices=wrong)
    assert main([str(ev), "--output_dir", str(tmp_path / "page"), "-q"]) == 0
    data = page_data(tmp_path / "page" / "index.html")
    assert data["thumbs"] == {} and "3 video(s) decode to other frames" in data["thumb_notes"][0]


def test_two_runs_show_agreement_and_common_question_accuracy(demo_files, tmp_path):
    tmp, ev, other, _, _ = demo_files
    assert main([str(ev), str(other), "--output_dir", str(tmp_path / "page"), "-q"]) == 0
    data = page_data(tmp_path / "page" / "index.html")
    assert [r["label"] for r in data["runs"]] == ["tiny-m", "other-m"]
    verdicts = [[q["r"][k]["v"] for k in (0, 1)] for q in data["questions"]]
    right = [[v == "correct" for v in pair] for pair in verdicts]  # failed and wrong alike: the report's b and c
    same = sum(a == b for a, b in right)
    across = data["across"]
    assert across["common"] == 12
    assert across["agreement"][0][1] == across["agreement"][1][0] == round(100 * same / 12, 1)
    assert across["agreement"][0][0] == 100.0
    pair = across["pairs"][0][1]
    assert pair == {"n": 12, "rr": sum(a and b for a, b in right), "rw": sum(a and not b for a, b in right),
                    "wr": sum(b and not a for a, b in right), "ww": sum(not a and not b for a, b in right)}
    assert across["pairs"][1][0]["rw"] == pair["wr"]
    correct = [sum(v[k] == "correct" for v in verdicts) for k in (0, 1)]
    assert [line["overall"] for line in across["by_category"]] == [round(100 * c / 12, 1) for c in correct]
    assert 0 < same < 12  # the other model answers the ground truth's text: some verdicts differ


def test_a_run_folder_and_a_paired_comparison(demo_files, tmp_path):
    tmp, _, _, _, _ = demo_files
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"paired_comparison": {"diff": 8.3, "mcnemar_p": 0.5, "run_path": str(tmp / f"eval_{TAG}.json")}}))
    assert main([str(tmp), "--output_dir", str(tmp_path / "page"), "--report_json", str(report), "-q"]) == 0
    data = page_data(tmp_path / "page" / "index.html")
    assert sorted(r["label"] for r in data["runs"]) == ["other-m", "tiny-m"]
    assert next(r for r in data["runs"] if r["label"] == "tiny-m")["judge"].endswith(f"judge_{TAG}.json")
    tiny = next(k for k, r in enumerate(data["runs"]) if r["label"] == "tiny-m")
    assert data["paired"] == {"diff": 8.3, "mcnemar_p": 0.5, "run_path": str(tmp / f"eval_{TAG}.json"), "run_k": tiny, "base_k": None}


@pytest.mark.parametrize("make, expect", [
    (lambda p: p / "missing.json", "no such file or folder"),
    (lambda p: (p / "eval_x.json").write_text("{") and p / "eval_x.json", "eval_x.json"),
    (lambda p: p, "no raw_*, sim_* or eval_*.json"),
])
def test_bad_inputs_are_one_line_and_exit_2(tmp_path, capsys, make, expect):
    target = make(tmp_path)
    assert main([str(target), "--output_dir", str(tmp_path / "page"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("view: ") and expect in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "page" / "index.html").exists()


def test_usage_errors_exit_2(tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["x.json", "--thumbnails", "-1"])
    assert exc.value.code == 2


def test_the_report_stage_writes_the_page_beside_report_md(tmp_path):
    from k9bench.report import ReportStage, config_from_argv
    from k9bench.stage import run_stage
    from tests.test_report import make_eval

    evals = [make_eval(tmp_path / f"eval_m{i}_mf32_n20.json", model=f"m{i}") for i in (1, 2)]
    stage = ReportStage(config_from_argv(["--input_file", *map(str, evals), "--report_dir", str(tmp_path / "rep"), "--note", "N", "-q"]))
    assert run_stage(stage) == 0
    data = page_data(tmp_path / "rep" / "index.html")
    assert (tmp_path / "rep" / "report.md").is_file()
    assert [r["label"] for r in data["runs"]] == ["m1", "m2"] and data["notes"] == ["N"] and len(data["questions"]) == 20
    assert data["across"]["common"] == 20


def test_a_raw_file_shows_answers_without_verdicts(demo_files, tmp_path):
    from k9bench.artifact_io import read_json, write_json_atomic

    tmp, ev, _, _, _ = demo_files
    data = read_json(ev)
    for key in ("threshold", "eval_mode", "category_wise_accuracy", "correct_count", "metadata"):
        data.pop(key, None)
    raw = {**data.pop("input_meta"), **data}
    for rec in raw["individual_results"]:
        for key in ("cosine_similarities", "is_correct", "evaluation_explanation", "eval_mode"):
            rec.pop(key, None)
    write_json_atomic(tmp_path / f"raw_{TAG}.json", raw)
    assert main([str(tmp_path / f"raw_{TAG}.json"), "--output_dir", str(tmp_path / "page"), "-q"]) == 0
    page = page_data(tmp_path / "page" / "index.html")
    assert page["runs"][0]["stage"] == "raw"
    assert {q["r"][0]["v"] for q in page["questions"]} == {"none", "failed"}
    assert {q["r"][0]["p"] for q in page["questions"]} == {None, 0}  # no verdict: n/a in comparisons, not wrong
    assert all("x" not in q["r"][0] for q in page["questions"]) and len(page["thumbs"]) == 3  # the frames come from the raw file


def test_a_decoder_missing_here_means_no_thumbnails_not_other_frames(demo_files, tmp_path, monkeypatch):
    import k9bench.video.cache as frame_cache
    from k9bench.video.sampling import DecoderUnavailable

    def unavailable(name):
        raise DecoderUnavailable(f"{name} is not installed")

    monkeypatch.setattr(frame_cache, "check_decoder", unavailable)
    tmp, ev, _, _, _ = demo_files
    assert main([str(ev), "--output_dir", str(tmp_path / "page"), "-q"]) == 0
    data = page_data(tmp_path / "page" / "index.html")
    assert data["thumbs"] == {} and "decoder is not available here" in data["thumb_notes"][0]


HOSTILE = ["<!-- an answer", "<script>alert(1)</script> and <script", "]]> </script><b>bold</b>", "a </SCRIPT > b"]


def hostile_eval(path: Path, video_dir: Path, indices: dict) -> Path:
    """The demo run with answers that would bend an HTML script block, and an unsafe video_url."""
    from k9bench.artifact_io import read_json, write_json_atomic

    data = read_json(demo_eval(path, video_dir, indices=indices))
    for rec in data["individual_results"]:
        rec["answer"] = HOSTILE[rec["idx"] % len(HOSTILE)]
    data["individual_results"][0]["video_url"] = "javascript:alert(document.cookie)"
    data["individual_results"][1]["video_url"] = "https://example.org/watch?v=1"
    data["input_meta"]["inference"]["dataset"]["source"] = "k9bench"
    return write_json_atomic(path, data)


def test_data_is_data_and_only_web_addresses_become_links(demo_files, demo_video_dir, tmp_path):
    _, _, _, _, indices = demo_files
    ev = hostile_eval(tmp_path / f"eval_{TAG}.json", demo_video_dir, indices)
    assert main([str(ev), "--output_dir", str(tmp_path / "page"), "--thumbnails", "0", "-q"]) == 0
    html = (tmp_path / "page" / "index.html").read_text()
    block = html[html.index('id="k9data">'):html.index("</script>", html.index('id="k9data">'))]
    assert "<" not in block[len('id="k9data">'):]  # no "<" at all inside the data block: it cannot end or bend it
    assert html.count("<script") == 2 and html.count("</script>") == 2
    data = page_data(tmp_path / "page" / "index.html")
    assert [q["r"][0]["a"] for q in data["questions"]] == [HOSTILE[i % len(HOSTILE)] for i in range(12)]  # the texts, intact
    links = {q["i"]: q["u"] for q in data["questions"]}
    assert links[0] == "" and links[1] == "https://example.org/watch?v=1"
    assert links[2].startswith("https://www.youtube.com/watch?v=")  # a K9-Bench video: its YouTube page


@pytest.mark.parametrize("value", ["abc", None, -3, True])
def test_a_malformed_frames_block_is_one_line_and_exit_2(demo_files, demo_video_dir, tmp_path, capsys, value):
    from k9bench.artifact_io import read_json, write_json_atomic

    _, ev, _, _, _ = demo_files
    data = read_json(ev)
    data["input_meta"]["inference"]["frames"]["max_frames"] = value if value is not None else {"n": 4}
    bad = write_json_atomic(tmp_path / f"eval_{TAG}.json", data)
    assert main([str(bad), "--output_dir", str(tmp_path / "page"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("view: ") and "inference.frames.max_frames" in err and str(bad) in err
    assert "\n" not in err and "Traceback" not in err and not (tmp_path / "page" / "index.html").exists()
    # the report stage: its report stands, the page is refused in one line, exit 2
    from k9bench.report import ReportStage, config_from_argv
    from k9bench.stage import run_stage

    stage = ReportStage(config_from_argv(["--input_file", str(bad), "--report_dir", str(tmp_path / "rep"), "-q"]))
    assert run_stage(stage) == 2
    assert (tmp_path / "rep" / "report.md").is_file() and not (tmp_path / "rep" / "index.html").exists()


def test_nothing_is_written_outside_the_output_dir(demo_files, tmp_path):
    from k9bench.artifact_io import read_json, write_json_atomic

    _, ev, _, _, _ = demo_files
    data = read_json(ev)
    store = tmp_path / "the_runs_frame_store"
    data["input_meta"]["inference"]["frames"]["frame_cache_dir"] = str(store)
    given = write_json_atomic(tmp_path / "in" / f"eval_{TAG}.json", data)
    before = sorted(p for p in tmp_path.rglob("*"))
    assert main([str(given), "--output_dir", str(tmp_path / "page"), "-q"]) == 0
    after = sorted(p for p in tmp_path.rglob("*") if tmp_path / "page" not in p.parents and p != tmp_path / "page")
    assert after == before and not store.exists()
    assert len(page_data(tmp_path / "page" / "index.html")["thumbs"]) == 3


def test_a_missing_report_json_is_one_line_and_exit_2(demo_files, tmp_path, capsys):
    _, ev, _, _, _ = demo_files
    assert main([str(ev), "--output_dir", str(tmp_path / "page"), "--report_json", str(tmp_path / "nope.json"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"view: --report_json {tmp_path / 'nope.json'}: no such file"


def test_each_run_shows_its_own_frames(demo_files, demo_video_dir, tmp_path):
    _, ev, _, _, indices = demo_files
    two = demo_eval(tmp_path / "eval_two-m_mf2_n-1.json", demo_video_dir, model="two-m", max_frames=2)
    same = demo_eval(tmp_path / "eval_same-m_mf4_n-1.json", demo_video_dir, model="same-m", indices=indices)
    assert main([str(ev), str(two), str(same), "--output_dir", str(tmp_path / "page"), "-q"]) == 0
    data = page_data(tmp_path / "page" / "index.html")
    seen_two = frame_indices(demo_video_dir, 2)
    for scene, strips in data["thumbs"].items():
        assert [s["runs"] for s in strips] == [[0, 2], [1]]  # one strip per distinct frame set, with the runs that saw it
        assert {i for _, i, _ in strips[0]["f"]} <= set(indices[scene][0])
        assert [i for _, i, _ in strips[1]["f"]] == seen_two[scene][0]
        assert seen_two[scene][0] != indices[scene][0]


def test_the_report_page_holds_the_baseline_and_the_paired_block(tmp_path):
    from k9bench.report import ReportStage, config_from_argv
    from k9bench.stage import run_stage
    from tests.test_report_paired import write_run

    run = write_run(tmp_path / "eval_A.json", [i % 4 != 3 for i in range(60)])
    base = write_run(tmp_path / "eval_B.json", [i % 2 == 0 for i in range(60)], model="Qwen3-VL-4B-Instruct")
    stage = ReportStage(config_from_argv(["--input_file", str(run), "--baseline", str(base), "--report_dir", str(tmp_path / "rep"), "-q"]))
    assert run_stage(stage) == 0
    data = page_data(tmp_path / "rep" / "index.html")
    assert [r["label"] for r in data["runs"]] == ["Qwen3-VL-8B-Instruct", "Qwen3-VL-4B-Instruct"]
    pc = json.loads((tmp_path / "rep" / "report.json").read_text())["paired_comparison"]
    assert (data["paired"]["run_k"], data["paired"]["base_k"]) == (0, 1) and data["paired"]["mcnemar_b"] == pc["mcnemar_b"]
    pairs = data["across"]["pairs"][0][1]
    assert (pairs["rw"], pairs["wr"]) == (pc["mcnemar_b"], pc["mcnemar_c"])  # one definition: the matrix's cells are b and c


def test_questions_with_another_ground_truth_are_compared_apart(demo_files, demo_video_dir, tmp_path):
    from k9bench.artifact_io import read_json, write_json_atomic

    _, ev, other, _, _ = demo_files
    data = read_json(other)
    for rec in data["individual_results"]:
        if rec["idx"] < 3:
            rec["ground_truth"] = "ABCDE"[("ABCDE".index(rec["ground_truth"]) + 1) % 5]  # shifted
        elif rec["idx"] == 3:
            rec["options"][4] = "E. another text"
    shifted = write_json_atomic(tmp_path / "eval_other-m_mf4_n-1.json", data)
    assert main([str(ev), str(shifted), "--output_dir", str(tmp_path / "page"), "--thumbnails", "0", "-q"]) == 0
    page = page_data(tmp_path / "page" / "index.html")
    apart = [q["i"] for q in page["questions"] if q["r"][1].get("gv")]
    assert apart == [0, 1, 2, 3] and all("gv" not in q["r"][0] for q in page["questions"])
    assert page["questions"][3]["gv"][1][1][4] == "another text"
    pairs = page["across"]["pairs"][0][1]
    assert pairs["n"] == 8 == pairs["rr"] + pairs["rw"] + pairs["wr"] + pairs["ww"]


@pytest.mark.parametrize("model, max_frames, audio, table", [
    ("tiny-m", 4, False, "Table 1"),
    ("Qwen3-VL-8B", 64, False, "Figure 3(a)"),  # the frame ablation's 64-frame point is its nearest row
    ("Gemini-2.5 Pro", 4, True, "Table 2"),  # audio + video: Table 2's rows
])
def test_the_mark_names_the_table_of_the_nearest_row(demo_video_dir, tmp_path, model, max_frames, audio, table):
    path = demo_eval(tmp_path / "eval_x_mf4_n-1.json", demo_video_dir, model=model, max_frames=max_frames)
    data = json.loads(path.read_text())
    data["input_meta"]["model_name_or_path"] = model
    if audio:
        data["input_meta"]["inference"]["frames"]["audio"] = True
        for record in data["individual_results"]:
            record["audio_used"] = True
    path.write_text(json.dumps(data))
    assert main([str(path), "--output_dir", str(tmp_path / "page"), "--thumbnails", "0", "-q"]) == 0
    run = page_data(tmp_path / "page" / "index.html")["runs"][0]
    assert run["differences"] and run["mark"] == f"not comparable to the paper's {table}"
