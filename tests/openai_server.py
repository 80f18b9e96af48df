"""A real OpenAI-compatible server started for a test module: on 127.0.0.1, a free port, its log kept.

``transformers serve`` (tests/evaluation/test_openai_server.py) and ``vllm serve``
(tests/vllm_backend/test_vllm_serve.py) take the same ``--host``/``--port`` flags and answer
``GET /v1/models`` once their model is loaded.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def running_server(
    command: list[str], log: Path, start_s: float, env: Mapping[str, str] = os.environ
) -> Iterator[tuple[str, list[str]]]:
    """Run ``command --host 127.0.0.1 --port PORT`` until the block ends; its base URL and served model ids."""
    port = free_port()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port)], stdout=sink, stderr=subprocess.STDOUT, env=env
        )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + start_s
        while True:
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            try:
                with urllib.request.urlopen(f"{base}/models", timeout=5) as answer:
                    models = json.load(answer)
                break
            except OSError:
                assert time.monotonic() < deadline, f"{command[0]} did not answer in {start_s} s"
                time.sleep(1)
        yield base, [model["id"] for model in models["data"]]
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def posts(log: Path, endpoint: str) -> int:
    """How many requests the server's access log shows for ``endpoint``."""
    return log.read_text(errors="replace").count(f'"POST /v1/{endpoint} HTTP/1.1" 200')
