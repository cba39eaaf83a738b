"""The real fenceq binary for the tests: $FENCEQ_BIN, or built with go."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def fenceq_bin() -> str:
    if os.environ.get("FENCEQ_BIN"):
        return os.environ["FENCEQ_BIN"]
    out = Path(tempfile.mkdtemp(prefix="fenceq-py-")) / "fenceq"
    subprocess.run(["go", "build", "-o", str(out), "."], cwd=ROOT, check=True)
    return str(out)


@pytest.fixture()
def server(fenceq_bin: str, tmp_path: Path) -> Iterator[str]:
    """A fenceq serving a fresh bbolt file on a free port; its base URL."""
    log = open(tmp_path / "fenceq.log", "w+")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCEQ_")}
    p = subprocess.Popen([fenceq_bin, "serve", "--db", str(tmp_path / "q.db"), "--listen", "127.0.0.1:0"],
                         stdout=log, stderr=log, env=env)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = re.search(r'msg="fenceq serving".* listen=(http://\S+)', (tmp_path / "fenceq.log").read_text())
            if m:
                break
            assert p.poll() is None, (tmp_path / "fenceq.log").read_text()
            time.sleep(0.02)
        else:
            raise AssertionError("fenceq did not start: " + (tmp_path / "fenceq.log").read_text())
        yield m.group(1)
    finally:
        p.terminate()
        p.wait(10)
        log.close()
