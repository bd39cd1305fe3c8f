"""A stand-in for ``python -m vllm.entrypoints.openai.api_server``, for k9bench.serving.serve's tests.

Run as ``fake_vllm_server.py --model M --host H --port P [...]``; ``FAKE_VLLM_MODE`` says how it
behaves: ``ok`` (answers ``GET /v1/models`` after ``FAKE_VLLM_DELAY`` seconds), ``die`` (writes a few
log lines, exits 3), ``hang`` (starts a child process, never answers), ``stubborn`` (answers, but
ignores SIGTERM, it and its child). Each mode writes its pid and its child's into ``FAKE_VLLM_PIDS``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    args, _ = parser.parse_known_args()
    mode = os.environ.get("FAKE_VLLM_MODE", "ok")
    print(f"INFO fake vLLM {mode} serving {args.model} on {args.host}:{args.port}", flush=True)
    pids = [os.getpid()]
    if mode in ("hang", "stubborn"):
        child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN) "
                                  "if %r == 'stubborn' else None; time.sleep(600)" % mode])
        pids.append(child.pid)
    if os.environ.get("FAKE_VLLM_PIDS"):
        with open(os.environ["FAKE_VLLM_PIDS"], "w") as fh:
            fh.write(" ".join(map(str, pids)))
    if mode == "die":
        for n in range(40):
            print(f"INFO loading line {n}", flush=True)
        print("ERROR RuntimeError: Unsupported CPU attention configuration", flush=True)
        return 3
    if mode == "hang":
        time.sleep(600)
        return 0
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(float(os.environ.get("FAKE_VLLM_DELAY", "0")))
    model = args.model

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet
            pass

        def do_GET(self):  # noqa: N802
            if self.path.rstrip("/") == "/v1/models":
                body = json.dumps({"object": "list", "data": [{"id": model, "root": model, "owned_by": "vllm"}]}).encode()
                self.send_response(200)
            else:
                body = b"{}"
                self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
