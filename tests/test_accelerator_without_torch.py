"""The device and attention refusals known without importing torch (issue 31 item 3): only what is sure."""

from __future__ import annotations

import sys

import pytest

from k9bench.models import accelerator as acc


@pytest.fixture
def driver(monkeypatch, tmp_path):
    """Pretend this machine has a GPU driver (one marker file present)."""
    monkeypatch.setattr(acc, "_GPU_DRIVER_MARKERS", (str(tmp_path),))


@pytest.fixture
def no_driver(monkeypatch, tmp_path):
    monkeypatch.setattr(acc, "_GPU_DRIVER_MARKERS", (str(tmp_path / "none"),))
    monkeypatch.setattr(acc.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(acc.sys, "platform", "linux")


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:0", "cuda:3", ""])
def test_a_machine_with_a_driver_and_no_hint_is_left_to_torch(driver, device):
    assert acc.device_problem_without_torch(device, env={}) is None


@pytest.mark.parametrize("visible", ["", "-1", " "])
def test_hidden_gpus_refuse_cuda(driver, visible):
    assert "hides every GPU" in acc.device_problem_without_torch("cuda", env={"CUDA_VISIBLE_DEVICES": visible})
    assert acc.device_problem_without_torch("cpu", env={"CUDA_VISIBLE_DEVICES": visible}) is None


def test_an_index_beyond_the_listed_gpus(driver):
    env = {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert acc.device_problem_without_torch("cuda:1", env=env) is None
    assert "at most 2 CUDA device(s)" in acc.device_problem_without_torch("cuda:2", env=env)
    assert acc.device_problem_without_torch("cuda:1", env={"CUDA_VISIBLE_DEVICES": "GPU-a1b2,GPU-c3d4"}) is None  # UUIDs count too


def test_no_driver_refuses_cuda_but_not_auto(no_driver):
    assert "no GPU driver" in acc.device_problem_without_torch("cuda:7", env={})
    assert acc.device_problem_without_torch("auto", env={}) is None


def test_mps_only_on_macos(monkeypatch):
    monkeypatch.setattr(acc.sys, "platform", "linux")
    assert "macOS" in acc.device_problem_without_torch("mps", env={})
    monkeypatch.setattr(acc.sys, "platform", "darwin")
    assert acc.device_problem_without_torch("mps", env={}) is None


@pytest.mark.parametrize("device, device_map, installed, env, expect", [
    ("cpu", None, True, {}, "device is cpu"),
    ("mps", None, True, {}, "device is mps"),
    ("auto", None, True, {"CUDA_VISIBLE_DEVICES": ""}, "device auto is cpu here"),
    ("auto", None, False, {}, "flash-attn is not installed"),
    ("cuda", None, False, {}, "flash-attn is not installed"),
    ("auto", "auto", False, {}, "flash-attn is not installed"),
    ("auto", None, True, {}, None),
    ("cuda:0", None, True, {}, None),
    ("cpu", "auto", True, {}, None),  # the placement decides the device: left to resolve_attention
])
def test_flash_attention_2_where_it_cannot_run(driver, monkeypatch, device, device_map, installed, env, expect):
    monkeypatch.setattr(acc, "flash_attn_available", lambda: installed)
    got = acc.attention_problem_without_torch("flash_attention_2", device, device_map=device_map, env=env)
    assert (got is None) if expect is None else (expect in got and "--attn_implementation sdpa" in got)
    assert acc.attention_problem_without_torch("sdpa", "cpu", env=env) is None


def test_it_imports_no_torch():
    import subprocess

    code = ("import sys, k9bench.models.accelerator as a; a.device_problem_without_torch('cuda:7'); "
            "a.attention_problem_without_torch('flash_attention_2', 'auto'); print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip() == "False"
