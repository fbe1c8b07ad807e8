"""The commands a new user is pointed at after `make demo`: the sandbox's fault switches
(`make sandbox ARGS=…`), more data (`make demo-data`), and the demo's own last lines."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from devtools.sandbox_api import SandboxServer
from tests.support.env import ROOT

SCRIPTS = ROOT / "scripts"


def script(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Import ``scripts/<name>.py`` as the Makefile runs it (its folder on the path)."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(f"first_hour_{name}", SCRIPTS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[SandboxServer]:
    """The sandbox as ``make airflow`` serves it (30/s), on a port of its own."""
    server = SandboxServer(0, rate=30, burst=30).start()
    monkeypatch.setenv("RETENTION_SANDBOX_PORT", str(server.server_address[1]))
    yield server
    server.stop()


def delete(server: SandboxServer, object_id: str) -> tuple[int, float, str | None]:
    """One DELETE as the media policy sends it: status, seconds, Retry-After."""
    request = urllib.request.Request(
        f"{server.url}/v1/tenants/1/assets/{object_id}", method="DELETE"
    )
    began = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, time.monotonic() - began, None
    except urllib.error.HTTPError as refused:
        return refused.code, time.monotonic() - began, refused.headers.get("Retry-After")


def test_each_fault_has_a_switch_and_clear_ends_them_all(
    served: SandboxServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sandbox = script("sandbox", monkeypatch)
    sandbox.main(["reject", "--oldest", "2"])
    sandbox.main(["hold", "asset-0000003"])
    assert delete(served, "asset-0000001")[0] == 422
    assert delete(served, "asset-0000002")[0] == 422
    assert delete(served, "asset-0000003")[0] == 403
    assert delete(served, "asset-0000004")[0] == 204

    sandbox.main(["latency", "300"])
    assert delete(served, "asset-0000005")[1] >= 0.3
    capsys.readouterr()
    sandbox.main(["stats"])
    faults = capsys.readouterr().out.split("faults: ")[1].strip()
    assert faults == "reject asset-0000001, asset-0000002; hold asset-0000003; latency 300 ms"

    sandbox.main(["storm", "30"])
    status, _, retry_after = delete(served, "asset-0000006")
    assert (status, retry_after) == (429, "1")

    sandbox.main(["clear"])
    status, seconds, _ = delete(served, "asset-0000001")
    assert (status, seconds < 0.3) == (204, True)
    capsys.readouterr()
    sandbox.main(["stats"])
    said = capsys.readouterr().out
    assert "7 requests (204: 3, 403: 1, 422: 2, 429: 1)" in said
    assert "3 objects deleted" in said
    assert "1 answered 429; faults: none" in said


def test_without_a_sandbox_the_switch_says_where_it_looked_and_what_serves_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("RETENTION_SANDBOX_PORT", str(port))
    with pytest.raises(
        SystemExit, match=rf"no sandbox API at http://127.0.0.1:{port} .*make airflow"
    ):
        script("sandbox", monkeypatch).main(["storm", "5"])


def test_demo_data_takes_its_row_counts_from_args(monkeypatch: pytest.MonkeyPatch) -> None:
    shown = subprocess.run(
        ["make", "-n", "--no-print-directory", "demo-data", "ARGS=--rows 50000 --media-rows 80"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()[-1]
    assert shown.endswith("python scripts/demo_data.py --rows 50000 --media-rows 80"), shown
    parsed = script("demo_data", monkeypatch).arguments().parse_args(shlex.split(shown)[-4:])
    assert (parsed.rows, parsed.media_rows) == (50_000, 80)


def test_the_demo_keeps_its_json_in_a_file_and_ends_with_commands_that_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demo = script("demo", monkeypatch)
    summaries = {"event_logs": {"rows_deleted": 3}, "media_assets": {"rows_deleted": 2}}
    saved = demo.save_summaries(summaries, tmp_path / "demo-summaries.json")
    assert json.loads(saved.read_text()) == summaries
    assert demo.SUMMARIES.as_posix() == ".local/demo-summaries.json"

    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    commands = re.findall(r"^  make (\S+)(?: ARGS=\"([^\"]*)\")?", demo.what_next(), re.MULTILINE)
    named = [target for target, _ in commands]
    assert {"airflow", "demo-data", "sandbox"} <= set(named)
    assert set(named) <= targets
    switches = [args.split()[0] for target, args in commands if target == "sandbox"]
    assert {"reject", "storm", "clear"} <= set(switches)
    sandbox = script("sandbox", monkeypatch).arguments()
    for target, args in commands:
        if target == "sandbox":
            sandbox.parse_args(shlex.split(args))  # exits on a switch it does not know
