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
