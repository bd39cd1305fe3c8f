"""Issue 23 item 4: URL credentials given to any flag (not only the API flags) never reach a log line, an
error line or a file. Each script's main() in process, refusing (or failing) on such a value."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from k9bench import CATEGORIES, LETTERS

CANARY = "canary-pw-7c1e0b9d55aa"


def raw_file(folder: Path) -> Path:
    record = {
        "idx": 1, "question_category": CATEGORIES[0], "video": "v.mp4", "ground_truth": "A", "response": "a dog sits",
        "answer": "a dog sits", "scene_name": "abcdefghijk", "question": "What does the dog do?",
        "options": [f"{letter}. option {letter}" for letter in LETTERS], "prompt": "p", "model_name": "m",
        "max_frames": 4, "timestamp": "2026-12-01T00:00:00",
    }
    path = folder / "raw_m_mf4_n1.json"
    path.write_text(json.dumps({"individual_results": [record], "total_count": 1}))
    return path


def assert_no_canary(folder: Path, *texts: str) -> None:
    for text in texts:
        assert CANARY not in text, [line for line in text.splitlines() if CANARY in line][:3]
    for path in folder.rglob("*"):
        if path.is_file():
            assert CANARY not in path.read_text(encoding="utf-8", errors="replace"), path


@pytest.mark.parametrize("url", [f"https://user:{CANARY}@127.0.0.1:9/models/emb", f"http://{CANARY}@127.0.0.1:9/emb"])
def test_embedding_model_url_credentials_are_masked(tmp_path, capsys, caplog, url):
    import evaluate_results

    caplog.set_level(logging.DEBUG)
    raw = raw_file(tmp_path)
    code = evaluate_results.main(["--mode", "calculate", "--input_file", str(raw), "--embedding_model", url, "--device", "cpu"])
    out = capsys.readouterr()
    assert code != 0
    assert "--embedding_model" in out.err + out.out + caplog.text
    assert_no_canary(tmp_path, out.out, out.err, caplog.text)


def test_model_path_url_credentials_are_masked(tmp_path, capsys, caplog, demo_video_dir):
    import eval_video_llm

    caplog.set_level(logging.DEBUG)
    url = f"https://user:{CANARY}@127.0.0.1:9/org/model"
    code = eval_video_llm.main(["--model_name_or_path", url, "--dataset_name", "demo", "--video_dir", str(demo_video_dir),
                                "--max_samples", "2", "--output_file", str(tmp_path / "raw.json"), "--device", "cpu"])
    out = capsys.readouterr()
    assert code != 0
    assert_no_canary(tmp_path, out.out, out.err, caplog.text)
