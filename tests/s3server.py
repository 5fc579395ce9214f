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
from pathlib import Path

import pytest

_names = itertools.count()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(log, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """A moto S3 server subprocess on 127.0.0.1 (output to the file ``log``, extra environment
    ``env``, e.g. ``INITIAL_NO_AUTH_ACTION_COUNT`` to make it check credentials), once it answers:
    (process, endpoint URL). Stop it with ``stop_moto``."""
    port = _free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
            return proc, endpoint
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_moto(proc)
                raise RuntimeError(f"moto server did not start: {Path(log).read_text()[-2000:]}") from None
            time.sleep(0.2)


def stop_moto(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory) -> Iterator[str]:
    """The URL of a moto S3 server running for this test session."""
    pytest.importorskip("moto.server", reason="moto[server] is not installed")
    pytest.importorskip("s3fs", reason="s3fs is not installed")
    proc, endpoint = start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        yield endpoint
    finally:
        stop_moto(proc)


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


def upload_folder(local: str | os.PathLike, url: str) -> str:
    """Copy the local folder ``local`` (a shard folder, say) to ``url`` in the test bucket with
    ``fs.put`` (every file, same relative paths); returns ``url``. Lets reader tests run on a bucket
    without the writer side."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    fs.put(f"{os.fspath(local).rstrip('/')}/", path.rstrip("/") + "/", recursive=True)
    fs.invalidate_cache()
    return url
