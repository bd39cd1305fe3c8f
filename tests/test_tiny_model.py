"""The tiny random-weight Qwen3-VL loads offline through the Auto classes and generates varied text."""

from __future__ import annotations

import pytest

from k9bench.tiny_model import EXTRA_TOKENS, SPECIAL_TOKENS, build_tiny_qwen3vl, main


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_qwen3vl(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def test_files_written(tiny_dir):
    for name in ("config.json", "model.safetensors", "tokenizer.json", "processor_config.json", "generation_config.json", "chat_template.jinja"):
        assert (tiny_dir / name).is_file(), name


def test_special_tokens_are_single_ids(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    ids = {t: tok.encode(t, add_special_tokens=False) for t in SPECIAL_TOKENS + EXTRA_TOKENS}
    assert all(len(v) == 1 for v in ids.values()), ids
    assert len({v[0] for v in ids.values()}) == len(ids)
    assert tok.eos_token == "<|im_end|>"


def test_video_generation_is_varied_and_deterministic(tiny_dir):
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from transformers.video_utils import VideoMetadata

    processor = AutoProcessor.from_pretrained(tiny_dir)
    model = AutoModelForImageTextToText.from_pretrained(tiny_dir)
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "Answer in JSON."}]},
        {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What does the dog do?"}]},
    ]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n") and "<|video_pad|>" in text
    frames = torch.randint(0, 255, (4, 3, 64, 96), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    meta = VideoMetadata(total_num_frames=40, fps=10.0, width=96, height=64, duration=4.0, frames_indices=[0, 13, 26, 39])
    inputs = processor(text=[text], videos=[frames], video_metadata=[meta], do_sample_frames=False, do_resize=False, return_tensors="pt")
    assert inputs["video_grid_thw"].tolist() == [[2, 4, 6]]
    outs = [model.generate(**inputs, max_new_tokens=16, do_sample=False)[0, inputs["input_ids"].shape[1]:].tolist() for _ in range(2)]
    assert outs[0] == outs[1]
    assert len(outs[0]) == 16 and len(set(outs[0])) >= 4, outs[0]
    assert model.config.eos_token_id not in outs[0][:4]


def test_cli_builds_same_weights(tmp_path, tiny_dir, capsys):
    assert main([str(tmp_path / "again")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "again")
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == (tiny_dir / "model.safetensors").read_bytes()


def test_head_dim_64_scales_mrope_and_generates(tmp_path):
    """--head_dim 64 (the size vLLM's CPU attention takes) gives mrope_section [16, 8, 8] and a model that runs."""
    import json

    import torch
    from transformers import AutoModelForImageTextToText

    assert main([str(tmp_path / "hd64"), "--head_dim", "64"]) == 0
    text = json.loads((tmp_path / "hd64" / "config.json").read_text())["text_config"]
    assert text["head_dim"] == 64 and text["rope_parameters"]["mrope_section"] == [16, 8, 8]
    model = AutoModelForImageTextToText.from_pretrained(tmp_path / "hd64")
    out = model.generate(input_ids=torch.tensor([[5, 6, 7]]), max_new_tokens=4, do_sample=False)
    assert out.shape == (1, 7)


@pytest.mark.parametrize("argv, message", [
    (["--head_dim", "12"], "not a positive multiple of 8"),
    (["--head_dim", "x"], "not a whole number"),
    (["--head_dim", "64", "--family", "internvl"], "--head_dim is only for --family qwen3_vl"),
])
def test_bad_head_dim_is_one_usage_line(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        main([str(tmp_path / "m"), *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_cli_output_has_no_progress_bar(tmp_path):
    """Run as a subprocess with stderr to a file (not a terminal): the log has no tqdm bar."""
    import subprocess
    import sys

    err = tmp_path / "err.log"
    with err.open("w") as fh:
        done = subprocess.run([sys.executable, "-m", "k9bench.tiny_model", str(tmp_path / "m")], stdout=subprocess.PIPE,
                              stderr=fh, text=True, timeout=300, check=False)
    assert done.returncode == 0 and done.stdout.strip() == str(tmp_path / "m")
    log = err.read_text()
    assert "\r" not in log and "it/s" not in log and "%|" not in log, log
    assert "tiny Qwen3-VL written to" in log


def test_building_in_process_writes_no_progress_bar(tmp_path, capfd):
    """A builder called as a function (tests, the launcher's demo) keeps tqdm out of a log that is not a terminal."""
    build_tiny_qwen3vl(tmp_path / "m")
    err = capfd.readouterr().err
    assert "Writing model shards" not in err and "it/s" not in err, err


@pytest.mark.parametrize("where", ["under a file", "an existing file"])
def test_an_output_folder_that_cannot_be_one_is_one_line_exit_2(tmp_path, where):
    """Issue 23: the output folder under a file, or an existing file, is refused before anything is built:
    exit 2, one line naming it, no traceback, the file unchanged."""
    import subprocess
    import sys

    a_file = tmp_path / "some_file.json"
    a_file.write_text("{}")
    out = a_file / "x" if where == "under a file" else a_file
    done = subprocess.run([sys.executable, "-m", "k9bench.tiny_model", str(out)], capture_output=True, text=True,
                          timeout=120, check=False)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and done.stdout == ""
    assert len(lines) == 1 and f"output_dir {out}" in lines[0] and "is a file, not a folder" in lines[0], done.stderr
    assert "Traceback" not in done.stderr and a_file.read_text() == "{}" and sorted(tmp_path.iterdir()) == [a_file]
