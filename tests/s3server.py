"""A real S3-compatible server for the tests: moto's standalone server started as a subprocess on
127.0.0.1, with s3fs pointed at it through the standard AWS environment variables (no tpuprep flag).

Skipped cleanly only when the ``moto[server]`` / ``s3fs`` packages are absent (``pip install
'tpuprep[test]'`` installs both). Traffic stays on loopback.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

_names = itertools.count()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory) -> Iterator[str]:
    """The URL of a moto S3 server running for this test session."""
    pytest.importorskip("moto.server", reason="moto[server] is not installed")
    pytest.importorskip("s3fs", reason="s3fs is not installed")
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def s3_env(s3_endpoint, monkeypatch) -> str:
    """The AWS environment variables pointing at the test server (inherited by subprocesses such as
    the CLI and Dask workers); returns the endpoint URL."""
    for name, value in {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing-secret", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    import fsspec

    fsspec.filesystem("s3").clear_instance_cache()  # no filesystem cached under another endpoint
    return s3_endpoint


@pytest.fixture
def bucket(s3_env) -> str:
    """A fresh, empty bucket on the test server; returns its ``s3://name`` URL."""
    import fsspec

    name = f"tpuprep-test-{os.getpid()}-{next(_names)}"
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir(name)
    return f"s3://{name}"
