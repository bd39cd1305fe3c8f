"""Every stage checked before the first one runs (and by ``--dry_run``): what needs no model weights and
no long work, so that a run that would fail at its third stage fails now, in seconds.

The checks, each refused in one line naming the launcher variable, exit 2, before the run's lock is taken
(so nothing is written and no folder is created):

- the dataset resolves (``DATASET_NAME``: ``demo``, an existing file or folder, or a Hub id ``owner/name``);
- the model, the embedding model and the dataset given as Hub ids are in the cache, or the Hub can be reached
  (not under ``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE`` or ``TRANSFORMERS_OFFLINE``, and one short probe of
  ``HF_ENDPOINT`` answers: :func:`k9bench.models.hub.hub_unreachable_reason`); a name that is no file or folder
  here is said to be taken for a Hub id;
- under ``SERVE=vllm`` the vLLM environment (``K9BENCH_VLLM_PYTHON``, else this python) imports vllm;
- the judge endpoint answers (``JUDGE_BASE_URL``; unset, the OpenAI API the judge would call:
  ``OPENAI_BASE_URL``, else :data:`k9bench.judge.cache.OPENAI_BASE_URL`);
- every stage's outputs can be written (nothing is created: a probe file in the nearest existing folder:
  :func:`k9bench.pipeline.plan.check_outputs`);
- each stage's own :meth:`k9bench.stage.Stage.preflight`.

Each registry entry names the checks of its stage (:attr:`k9bench.pipeline.registry.StageEntry.checks`);
:func:`k9bench.pipeline.plan.check_settings` runs those of the stages in the plan, each once.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

from k9bench.inference.registry import REGISTRY

log = logging.getLogger("k9bench.pipeline")

ENGINE_IMPORT_TIMEOUT_S = 120.0
"""How long ``python -c "import <engine>"`` may take (a cold import of vLLM takes tens of seconds)."""


class PreflightError(Exception):
    """One refusal, in the launcher's words (exit 2)."""


def check_dataset(name: str, *, given: bool = True) -> None:
    """DATASET_NAME resolves: the demo set, an existing file or folder, or a Hub id (cached, or the Hub reachable).
    A name the user ``given`` that is no file or folder here is said to be taken for a Hub id."""
    from k9bench.models import hub

    if name == "demo":
        return
    path = Path(os.path.expanduser(name))
    if path.exists():
        return
    if hub.looks_like_local_path(name) or name.count("/") != 1 or path.suffix.lower() in (".json", ".jsonl", ".parquet"):
        raise PreflightError(f"DATASET_NAME={name}: no such file or folder, and not a Hub dataset id of the form owner/name "
                             "(give a local parquet/json/jsonl file or save_to_disk folder, a Hub id, or demo)")
    if hub.is_cached(name, repo_type="dataset"):
        return
    if given:
        log.warning("DATASET_NAME=%s: no such file or folder here; taken for a Hugging Face Hub dataset id (for a local copy, "
                    "give its path as it is from this folder)", name)
    unreachable = hub.hub_unreachable_reason("HF_DATASETS_OFFLINE")
    if unreachable:
        raise PreflightError(f"DATASET_NAME={name}: not in the Hugging Face cache ({hub.hub_cache_dir()}) as a Hub dataset id, no such "
                             f"file or folder here, and the Hub cannot be reached ({unreachable}); download it while online "
                             f"(`hf download {name} --repo-type dataset --local-dir k9bench_data`) and set DATASET_NAME=k9bench_data, "
                             "or use DATASET_NAME=demo")


def check_model_cached(variable: str, name: str, what: str) -> None:
    """A Hub id must be in the cache or the Hub reachable (offline mode, or a probe that fails: refused; a local
    folder is checked by the settings already)."""
    from k9bench.models import hub

    if not name or Path(os.path.expanduser(name)).exists() or not hub.is_hub_id(name) or hub.is_cached(name, repo_type="model"):
        return
    unreachable = hub.hub_unreachable_reason("TRANSFORMERS_OFFLINE")
    if unreachable:
        raise PreflightError(f"{variable}={name}: the {what} is not in the Hugging Face cache ({hub.hub_cache_dir()}) and the Hub "
                             f"cannot be reached ({unreachable}); download it while online (`hf download {name}`) or set {variable} "
                             "to a local folder")


def vllm_python(env: dict) -> str:
    from k9bench.serving.serve import PYTHON_ENV

    return env.get(PYTHON_ENV) or sys.executable


def check_imports(python: str, module: str, variable: str, where: str, fix: str) -> None:
    """``python`` imports ``module`` (a subprocess, bounded by :data:`ENGINE_IMPORT_TIMEOUT_S`); else one line naming
    ``variable``, ``where`` the python is and how to ``fix`` it."""
    try:
        done = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, timeout=ENGINE_IMPORT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise PreflightError(f"{variable}: {where} did not import {module} within {ENGINE_IMPORT_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise PreflightError(f"{variable}: the python cannot run: {where} ({exc.strerror or exc})") from None
    if done.returncode != 0:
        lines = [ln.strip() for ln in (done.stderr or "").splitlines() if ln.strip()]
        why = lines[-1] if lines else f"exit {done.returncode}"
        raise PreflightError(f"{variable}: {where} cannot import {module} ({why}); {fix}")


def check_vllm(env: dict, variable: str) -> None:
    """The vLLM environment (``K9BENCH_VLLM_PYTHON``, else this python) imports vllm: it starts the server."""
    from k9bench.serving.serve import PYTHON_ENV

    python = vllm_python(env)
    which = f"{PYTHON_ENV}={python}" if env.get(PYTHON_ENV) else f"this python ({python}; set {PYTHON_ENV} to the vLLM environment's)"
    check_imports(python, "vllm", variable, f"the vLLM environment, {which},",
                  f"install it (docs/vllm.md) or set {PYTHON_ENV} to the python of an environment that has it")


def check_backend_engine(name: str) -> None:
    """``BACKEND=name``: this python, which runs inference in the job, imports the backend's engine
    (:attr:`k9bench.inference.registry.BackendEntry.engine_module`; nothing to check when it has none)."""
    backend = REGISTRY[name]
    if backend.engine_module:
        check_imports(sys.executable, backend.engine_module, f"BACKEND={name}", f"this python ({sys.executable})",
                      f"run the launcher from an environment that has it (PYTHON=.../bin/python; {backend.summary})")


def check_endpoint(url: str) -> None:
    """Something answers at JUDGE_BASE_URL's host and port (a TCP connection, 5 s)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "", port), timeout=5).close()
    except OSError as exc:
        raise PreflightError(f"JUDGE_BASE_URL={url}: nothing answers at {parts.hostname}:{port} ({exc.strerror or exc}); "
                             "start the judge server or fix the URL") from None


# --------------------------------------------------------------------------- the registry entries' checks
# Each takes (settings, environ); an entry names those of its stage (StageEntry.checks).


def dataset(s, env: dict) -> None:
    """DATASET_NAME resolves (:func:`check_dataset`)."""
    check_dataset(s.values["DATASET_NAME"], given=bool(env.get("DATASET_NAME")))


def model(s, env: dict) -> None:
    """MODEL_NAME is cached when offline, unless a server started elsewhere answers for it or the demo builds it."""
    if not s.values["SERVE_URL"] and not s.demo_build_model:
        check_model_cached("MODEL_NAME", s.values["MODEL_NAME"], "model")


def engines(s, env: dict) -> None:
    """SERVE=vllm: the vLLM environment imports vllm; BACKEND: this python imports the backend's own engine."""
    if s.values["SERVE"]:
        check_vllm(env, f"SERVE={s.values['SERVE']}")
    check_backend_engine(s.values["BACKEND"])


def embedding_model(s, env: dict) -> None:
    """EMBEDDING_MODEL is cached when offline."""
    check_model_cached("EMBEDDING_MODEL", s.values["EMBEDDING_MODEL"], "embedding model")


def judge_endpoint(s, env: dict) -> None:
    """Something answers at JUDGE_BASE_URL; unset, the OpenAI API the judge would call answers (one short probe,
    proxies honoured)."""
    if s.values["JUDGE_BASE_URL"]:
        check_endpoint(s.values["JUDGE_BASE_URL"])
        return
    from k9bench.judge.cache import OPENAI_BASE_URL
    from k9bench.models.hub import url_unreachable_reason

    url = env.get("OPENAI_BASE_URL") or OPENAI_BASE_URL  # what the openai client calls when given no base URL
    why = url_unreachable_reason(url)
    if why:
        raise PreflightError(f"JUDGE_BASE_URL is not set, so the judge would call {url}, which cannot be reached ({why}); set "
                             "JUDGE_BASE_URL to a judge server that answers, or unset OPENAI_API_KEY to run without the judge")


def check_stages(stages: dict) -> None:
    """Each stage's own :meth:`~k9bench.stage.Stage.preflight`."""
    from k9bench.stage import StageError

    for name, stage in stages.items():
        try:
            stage.preflight()
        except StageError as exc:
            raise PreflightError(f"step {name}: {exc}") from None
