"""k9bench.models.accelerator: device, dtype and attention policy, the flash_attention_2 -> sdpa fallback, out of memory."""

import pytest
import torch

from k9bench.models import accelerator as acc
from k9bench.models.accelerator import AcceleratorError, AttentionChoice

NO_GPU = not torch.cuda.is_available()


@pytest.fixture
def gpu(monkeypatch):
    """Pretend two CUDA devices are visible (nothing is ever placed on them here)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


# ---------------------------------------------------------------- device


@pytest.mark.parametrize("requested", [None, "", "auto"])
def test_auto_device(requested, gpu):
    assert acc.resolve_device(requested) == "cuda"


def test_auto_device_without_gpu(no_gpu):
    assert acc.resolve_device("auto") == "cpu"


@pytest.mark.parametrize("requested, message", [
    ("cuda", "no CUDA device is available"),
    ("cuda:1", "no CUDA device is available"),
    ("gpu", "expected auto, cpu, cuda, cuda:N or mps"),
    ("cuda:x", "expected auto, cpu, cuda, cuda:N or mps"),
])
def test_explicit_device_is_checked(no_gpu, requested, message):
    with pytest.raises(AcceleratorError, match=message):
        acc.resolve_device(requested)


def test_cuda_index_is_checked_against_the_device_count(gpu):
    assert acc.resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(AcceleratorError, match="only 2 CUDA device"):
        acc.resolve_device("cuda:2")


def test_cpu_is_always_fine(no_gpu):
    assert acc.resolve_device("cpu") == "cpu"


# ---------------------------------------------------------------- dtype


@pytest.mark.parametrize("requested, bf16, device, expected, explicit", [
    (None, None, "cuda", "bfloat16", False),          # the reference's bf16 on a GPU
    (None, None, "cpu", "float32", False),
    (None, True, "cpu", "bfloat16", True),            # --bf16
    (None, False, "cuda", "float32", True),           # --bf16 False
    ("float16", None, "cuda", "float16", True),       # an explicit dtype wins
    ("float16", True, "cuda", "float16", True),       # ... over --bf16 too (with a warning)
    ("auto", None, "cuda", "auto", True),             # transformers' auto: the checkpoint's dtype
])
def test_dtype_policy(requested, bf16, device, expected, explicit):
    choice = acc.resolve_dtype(requested, device, bf16=bf16)
    assert (choice.name, choice.explicit) == (expected, explicit)
    assert choice.reason


def test_dtype_policy_with_a_caller_default():
    choice = acc.resolve_dtype(None, "cuda:0", gpu_default="float32", gpu_default_reason="scoring default")
    assert (choice.name, choice.reason, choice.explicit) == ("float32", "scoring default", False)
    assert choice.torch_dtype() is torch.float32
    assert acc.resolve_dtype("bfloat16", "cuda", gpu_default="float32").torch_dtype() is torch.bfloat16
    assert acc.torch_dtype("auto") == "auto"


def test_unknown_dtype_names_the_flag():
    with pytest.raises(AcceleratorError, match="--dtype 'float8'"):
        acc.resolve_dtype("float8", "cpu", flag="--dtype")


# ---------------------------------------------------------------- attention


def test_default_attention_on_cpu_is_sdpa_with_a_warning():
    choice = acc.resolve_attention(None, "cpu")
    assert choice.implementation == "sdpa" and not choice.explicit
    assert "needs a CUDA GPU" in choice.warning


def test_default_attention_on_gpu(monkeypatch):
    monkeypatch.setattr(acc, "flash_attn_available", lambda: True)
    assert acc.resolve_attention("auto", "cuda") == AttentionChoice("flash_attention_2", None)
    monkeypatch.setattr(acc, "flash_attn_available", lambda: False)
    choice = acc.resolve_attention("auto", "cuda")
    assert choice.implementation == "sdpa" and "flash-attn is not installed" in choice.warning


@pytest.mark.parametrize("device, installed, message", [
    ("cpu", True, "needs a CUDA GPU"),
    ("cuda", False, "flash-attn is not installed"),
])
def test_explicit_flash_attention_that_cannot_run_is_an_error(monkeypatch, device, installed, message):
    monkeypatch.setattr(acc, "flash_attn_available", lambda: installed)
    with pytest.raises(AcceleratorError, match=message):
        acc.resolve_attention("flash_attention_2", device)


def test_explicit_other_kernel_is_noted_not_warned():
    choice = acc.resolve_attention("eager", "cpu")
    assert choice.implementation == "eager" and choice.explicit and choice.warning is None
    assert "reference uses flash_attention_2" in choice.note
    with pytest.raises(AcceleratorError, match="choose one of"):
        acc.resolve_attention("paged", "cpu")


def test_default_flash_attention_falls_back_to_sdpa_logged_and_recorded(caplog):
    asked = []

    def load(kernel):
        asked.append(kernel)
        if kernel == "flash_attention_2":
            raise ValueError("FooModel does not support Flash Attention 2.0 yet\nmore text")
        return "model"

    model, used = acc.load_with_attention(load, AttentionChoice("flash_attention_2", None), what="the test model")
    assert model == "model" and asked == ["flash_attention_2", "sdpa"]
    assert used.implementation == "sdpa"
    assert "does not support Flash Attention 2.0 yet" in used.warning and "the test model" in used.warning
    assert any("using sdpa instead" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def test_explicit_flash_attention_is_never_replaced():
    def load(kernel):
        raise ValueError("no flash for you")

    with pytest.raises(ValueError, match="no flash"):
        acc.load_with_attention(load, AttentionChoice("flash_attention_2", "flash_attention_2"))


def test_other_load_errors_are_not_mistaken_for_attention_ones():
    def load(kernel):
        raise OSError("no such model")

    with pytest.raises(OSError):
        acc.load_with_attention(load, AttentionChoice("flash_attention_2", None))


# ---------------------------------------------------------------- out of memory


@pytest.mark.parametrize("exc, expected", [
    (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"), True),
    (RuntimeError("CUDA error: device-side assert triggered"), False),
    (ValueError("out of memory"), False),
    (KeyError("x"), False),
])
def test_is_out_of_memory(exc, expected):
    assert acc.is_out_of_memory(exc) is expected


def test_free_accelerator_memory_is_harmless_without_gpu():
    acc.free_accelerator_memory()
