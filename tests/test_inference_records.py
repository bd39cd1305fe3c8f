"""What a run tells a person and a reader of its file: progress lines in a batch log (issue 25), the videos it
used by content (issue 24), whether its prompts are the reference's (issue 24), and the stage block."""

from __future__ import annotations

import hashlib
import json
import re
import threading

import pytest

import eval_video_llm
from k9bench.inference.runner import EXIT_OK
from tests.test_inference_units import use_backend  # noqa: F401 (fixture)
from tests.test_inference_units import FakeBackend, args_for

PROGRESS = re.compile(r"inference: (\d+)/12 \((\d+)%\), [0-9.]+ questions/s, (ETA [0-9]+ (s|min)|took [0-9]+ (s|min)), (\d+) failed$")


def progress_lines(err: str) -> list[re.Match]:
    found = []
    for line in err.splitlines():
        if "k9bench.progress" in line:
            match = PROGRESS.search(line)
            assert match, line  # every progress line has the documented form
            found.append(match)
    return found


@pytest.mark.parametrize("interval, expected_done", [
    # a long interval: a line at each tenth of the 12 questions only
    ("1000", [2, 3, 4, 5, 6, 8, 9, 10, 11, 12]),
    # an interval shorter than a question: a line after every question (the "at least every N s" rule)
    ("0.000001", list(range(1, 13))),
])
def test_progress_lines_in_a_batch_log(use_backend, demo_video_dir, tmp_path, capfd, monkeypatch, interval, expected_done):
    monkeypatch.setenv("K9BENCH_PROGRESS_INTERVAL", interval)
    monkeypatch.delenv("K9BENCH_NO_PROGRESS", raising=False)
    use_backend(FakeBackend(fail_questions=()))
    out = tmp_path / "raw.json"
    argv = [a for a in args_for(demo_video_dir, out, "--batch_size", "1") if a != "-q"]  # INFO lines, as in a SLURM log
    capfd.readouterr()
    assert eval_video_llm.main(argv) == EXIT_OK
    err = capfd.readouterr().err  # not a terminal: no bar
    lines = progress_lines(err)
    assert [int(m.group(1)) for m in lines] == expected_done
    assert all(m.group(3).startswith("ETA") for m in lines[:-1]) and lines[-1].group(3).startswith("took")
    assert all(int(m.group(2)) == round(100 * int(m.group(1)) / 12) for m in lines)
    assert "it/s" not in err and "\r" not in err and "|" not in err


def test_progress_counts_failures(use_backend, demo_video_dir, tmp_path, capfd, monkeypatch):
    from k9bench.data.dataset import load_questions

    monkeypatch.setenv("K9BENCH_PROGRESS_INTERVAL", "1000")
    bad = load_questions("demo").questions[0].question
    use_backend(FakeBackend(fail_questions=(bad,)))
    argv = [a for a in args_for(demo_video_dir, tmp_path / "raw.json", "--batch_size", "1") if a != "-q"]
    capfd.readouterr()
    assert eval_video_llm.main(argv) == EXIT_OK
    lines = progress_lines(capfd.readouterr().err)
    assert int(lines[-1].group(6)) == 1 and int(lines[0].group(6)) == 1


def test_the_file_lists_each_video_used_hashed_once_on_a_worker_thread(use_backend, demo_video_dir, tmp_path, monkeypatch):
    import k9bench.stage as stage_module

    hashed = []
    real = stage_module.file_digest

    def counting(path):
        hashed.append((str(path), threading.current_thread().name))
        return real(path)

    monkeypatch.setattr(stage_module, "file_digest", counting)
    use_backend(FakeBackend())
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--batch_size", "1")) == EXIT_OK
    data = json.loads(out.read_text())
    videos = data["videos"]
    assert [v["scene_name"] for v in videos] == ["demoVid0001", "demoVid0002", "demoVid0003"]
    for v in videos:
        path = demo_video_dir / v["video"]
        assert v["bytes"] == path.stat().st_size and v["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        recs = [r for r in data["individual_results"] if r["scene_name"] == v["scene_name"]]
        assert v["duration"] == recs[0]["video_duration"] and v["frames_sampled"] == recs[0]["num_frames"] > 0
        assert all(r["video_file"] == {"bytes": v["bytes"], "sha256": v["sha256"]} for r in recs)
    video_hashes = [h for h in hashed if h[0].endswith(".mp4")]
    assert len(video_hashes) == 3  # once per video, not per question (12)
    assert all(name != "MainThread" for _, name in video_hashes)


def test_a_resumed_run_still_lists_the_videos_of_earlier_records(use_backend, demo_video_dir, tmp_path):
    out = tmp_path / "raw.json"
    use_backend(FakeBackend(signal_after=5))
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--batch_size", "1")) == 75
    use_backend(FakeBackend())
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--batch_size", "1")) == EXIT_OK
    assert [v["scene_name"] for v in json.loads(out.read_text())["videos"]] == ["demoVid0001", "demoVid0002", "demoVid0003"]


def test_reference_prompts_are_confirmed_by_hash(use_backend, demo_video_dir, tmp_path, monkeypatch):
    """A stand-in text of ours plays the reference's system prompt (its hash swapped in); one character off is not it."""
    import k9bench.data.published as published

    text = "A stand-in system prompt written for this test."
    monkeypatch.setattr(published, "REFERENCE_SYSTEM_PROMPT_SHA256", hashlib.sha256(text.encode()).hexdigest())
    use_backend(FakeBackend())
    verdicts = {}
    for name, body in (("same", text + "\n"), ("one_char_off", text[:-1] + "!")):
        prompt = tmp_path / f"{name}.txt"
        prompt.write_text(body)
        out = tmp_path / f"raw_{name}.json"
        assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "1", "--system_prompt_file", str(prompt))) == EXIT_OK
        verdicts[name] = json.loads(out.read_text())["inference"]["prompt"]["reference_prompts"]
    assert verdicts == {"same": "reference prompts (confirmed)", "one_char_off": "unconfirmed"}


def test_the_stage_block_makes_a_changed_setting_visible(use_backend, demo_video_dir, tmp_path):
    from k9bench.inference.stage import InferenceStage, config_from_argv

    use_backend(FakeBackend())
    out = tmp_path / "raw.json"
    argv = args_for(demo_video_dir, out, "--max_samples", "2")
    assert InferenceStage(config_from_argv(argv), argv).done() == f"{out} is missing"
    assert eval_video_llm.main(argv) == EXIT_OK
    assert InferenceStage(config_from_argv(argv), argv).done() is None
    changed = InferenceStage(config_from_argv(argv + ["--max_new_tokens", "5"]), argv)
    assert "max_new_tokens" in changed.done()
    other_range = InferenceStage(config_from_argv(argv[:-1] + ["3"]), argv)
    assert "max_samples" in other_range.done()


def test_redo_changed_sets_the_earlier_file_aside_and_redoes_it(use_backend, demo_video_dir, tmp_path):
    """The launcher's mode (a changed setting reruns the stage): with ``redo_changed`` records made with other
    settings are moved aside, never deleted, and redone; by hand the same change is refused (exit 2)."""
    from k9bench.inference.stage import InferenceStage, config_from_argv
    from k9bench.stage import run_stage

    use_backend(FakeBackend())
    out = tmp_path / "raw.json"
    argv = args_for(demo_video_dir, out, "--max_samples", "2")
    assert eval_video_llm.main(argv) == EXIT_OK
    first = out.read_bytes()
    changed = argv + ["--max_new_tokens", "5"]
    assert eval_video_llm.main(changed) == 2 and out.read_bytes() == first
    backend = use_backend(FakeBackend())
    assert run_stage(InferenceStage(config_from_argv(changed), changed, redo_changed=True)) == EXIT_OK
    assert backend.answered == 2
    aside = [p for p in tmp_path.iterdir() if ".replaced-" in p.name]
    assert len(aside) == 1 and aside[0].read_bytes() == first
    assert json.loads(out.read_text())["inference"]["max_new_tokens"] == 5
    assert InferenceStage(config_from_argv(changed), changed).done() is None


def test_a_smaller_selection_of_a_finished_file_leaves_the_file_and_its_block_alone(use_backend, demo_video_dir, tmp_path):
    from k9bench.inference.stage import InferenceStage, config_from_argv

    use_backend(FakeBackend())
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "4")) == EXIT_OK
    before = out.read_bytes()
    smaller = args_for(demo_video_dir, out, "--max_samples", "2")
    assert eval_video_llm.main(smaller) == EXIT_OK and out.read_bytes() == before  # nothing to do, nothing rewritten
    assert "max_samples" in InferenceStage(config_from_argv(smaller), smaller).done()  # the block still says 4
    # a file written before the stage block existed gets it on a rerun that has nothing else to do
    data = json.loads(before)
    del data["stage"]
    out.write_text(json.dumps(data))
    again = args_for(demo_video_dir, out, "--max_samples", "4")
    assert InferenceStage(config_from_argv(again), again).done().endswith("records no stage settings (written by another tool or an older version)")
    assert eval_video_llm.main(again) == EXIT_OK
    assert InferenceStage(config_from_argv(again), again).done() is None
    assert json.loads(out.read_text())["individual_results"] == data["individual_results"]


def test_redo_changed_redoes_a_file_made_from_another_dataset(use_backend, demo_video_dir, tmp_path):
    """The records' own fingerprint does not name the dataset; the stage block does: the launcher's mode redoes a
    file made from another dataset with the same idx values, instead of reusing its answers."""
    from k9bench.data.demo import demo_rows
    from k9bench.inference.stage import InferenceStage, config_from_argv
    from k9bench.stage import run_stage

    rows = demo_rows()
    for row in rows:
        row["question"] = "Another wording: " + row["question"]
    other = tmp_path / "other.json"
    other.write_text(json.dumps(rows))
    use_backend(FakeBackend())
    out = tmp_path / "raw.json"
    argv = args_for(demo_video_dir, out, "--max_samples", "2")
    assert eval_video_llm.main(argv) == EXIT_OK
    changed = argv + ["--dataset_name", str(other)]
    backend = use_backend(FakeBackend())
    assert run_stage(InferenceStage(config_from_argv(changed), changed, redo_changed=True)) == EXIT_OK
    assert backend.answered == 2
    assert all(r["question"].startswith("Another wording") for r in json.loads(out.read_text())["individual_results"])
    # a longer range of the same settings reuses the records it has
    longer = changed[:-4] + ["--max_samples", "3", "--dataset_name", str(other)]
    assert run_stage(InferenceStage(config_from_argv(longer), longer, redo_changed=True)) == EXIT_OK
    assert backend.answered == 3
