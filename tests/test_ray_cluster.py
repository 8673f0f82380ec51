"""`--engine ray --ray-address` on a cluster started by hand, as a user does: `ray start --head`, a
second node joined with `ray start --address`, both on loopback; the worker node killed mid-run;
and each way of not reaching a cluster as one line.

The cluster runs on 127.0.0.2: Ray turns 127.0.0.1 and localhost into the machine's outward
address (its nodes must reach each other), other loopback addresses it keeps. Token authentication
is on, as on a machine where Ray made a token once; the driver is not told about it."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")
# One Ray on the machine at a time: `ray.init()` joins a cluster another test started by hand.
pytestmark = [pytest.mark.real, pytest.mark.xdist_group("ray")]

CLIPS = Path(__file__).parent / "data"
ORDER = ["tt-weasels", "agent-newlocation", "privacy-prompt", "ss-noservice", "vm-options", "basic-pbx-ivr-main"]
RAY = shutil.which("ray")
START_TIMEOUT_S = 120
HOST = "127.0.0.2"
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}, "RAY_USAGE_STATS_ENABLED": "0"}
RAY_ENV = {**ENV, "RAY_AUTH_MODE": "token"}  # a node joining by address sends the token only when told


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_command(*arguments: str, timeout: float = START_TIMEOUT_S) -> None:
    done = subprocess.run([RAY, *arguments], env=RAY_ENV, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture
def cluster():
    """A head and a worker node, each of one CPU, on 127.0.0.1; always stopped."""
    if RAY is None:
        pytest.skip("the `ray` command is not installed")
    port, worker_port = free_port(), free_port()
    try:
        ray_command("get-auth-token", "--generate")
        ray_command("start", "--head", "--node-ip-address", HOST, "--port", str(port), "--num-cpus", "1",
                    "--include-dashboard=false", "--disable-usage-stats")
        ray_command("start", "--address", f"{HOST}:{port}", "--node-ip-address", HOST, "--num-cpus", "1",
                    "--node-manager-port", str(worker_port), "--disable-usage-stats")
        yield f"{HOST}:{port}", worker_port
    finally:
        subprocess.run([RAY, "stop", "--force"], env=RAY_ENV, capture_output=True, timeout=60)


def transcribe(corpus: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "whisperspec.cli", "transcribe", str(corpus), "--model", "tiny.en",
                             "--language", "en", "--output-dir", str(out), "--quiet", *extra],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def corpus_of(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for copy in ("a", "b"):
        for index, clip in enumerate(ORDER):
            shutil.copy(CLIPS / f"{clip}.flac", corpus / f"{copy}{index}-{clip}.flac")
    return corpus


def ray_processes() -> list:
    return [p for p in psutil.process_iter(["cmdline"]) if any("ray" in part for part in (p.info["cmdline"] or [])[:3])]


def remote_addresses(processes) -> set[str]:
    addresses = set()
    for process in processes:
        try:
            addresses |= {c.raddr.ip for c in process.net_connections(kind="inet") if c.raddr}
        except psutil.Error:
            continue
    return addresses


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


def test_a_folder_on_a_cluster_started_by_hand_survives_its_worker_node_and_a_rerun_skips_it(cluster, tmp_path):
    address, worker_port = cluster
    corpus = corpus_of(tmp_path)
    local = transcribe(corpus, tmp_path / "local")
    assert local.wait(timeout=600) == 0, local.stderr.read()

    out = tmp_path / "ray"
    run = transcribe(corpus, out, "--engine", "ray", "--ray-address", address, "--ray-cpus-per-worker", "1",
                     "--batch-size", "2")
    driver = psutil.Process(run.pid)
    addresses, killed = set(), False
    deadline = time.monotonic() + 600
    while run.poll() is None and time.monotonic() < deadline:
        addresses |= remote_addresses([driver, *ray_processes()])
        rows = (out / "results.jsonl").read_text().splitlines() if (out / "results.jsonl").is_file() else []
        if rows and not killed:  # a chunk is back: the worker node dies holding another
            for raylet in [p for p in ray_processes() if f"--node_manager_port={worker_port}" in " ".join(p.info["cmdline"])]:
                for process in [*raylet.children(recursive=True), raylet]:
                    process.kill()
            killed = True
        time.sleep(0.2)
    errors = run.stderr.read()
    assert run.wait(timeout=60) == 0, errors
    assert killed and "Traceback" not in errors
    assert "handed out again" in errors  # the worker node died holding files: the head did them
    assert addresses and all(is_loopback(a) for a in addresses), addresses

    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    names = sorted(p.stem for p in corpus.iterdir())
    assert sorted(r["output"] for r in rows) == names and {r["status"] for r in rows} == {"ok"}  # each once
    for name in names:
        assert (out / f"{name}.txt").read_text() == (tmp_path / "local" / f"{name}.txt").read_text(), name

    again = transcribe(corpus, out, "--engine", "ray", "--ray-address", address, "--ray-cpus-per-worker", "1")
    assert again.wait(timeout=300) == 0
    assert f"{len(names)} of {len(names)} files already done" in again.stderr.read()
    assert len((out / "results.jsonl").read_text().splitlines()) == len(names)


def one_file(tmp_path: Path) -> Path:
    (tmp_path / "corpus").mkdir()
    shutil.copy(CLIPS / "tt-weasels.flac", tmp_path / "corpus")
    return tmp_path / "corpus"


def the_one_error(run: subprocess.Popen, address: str, hint: str) -> str:
    errors = run.stderr.read()
    assert run.wait(timeout=120) == 1, errors
    lines = [line for line in errors.splitlines() if line.startswith("whisperspec:") and "files ok" not in line
             and "warning" not in line]
    assert len(lines) == 1 and address in lines[0] and hint in lines[0], errors
    assert "Traceback" not in errors
    return lines[0]


def test_no_cluster_there_is_one_line_naming_the_address(tmp_path):
    address = f"{HOST}:{free_port()}"
    started = time.monotonic()
    run = transcribe(one_file(tmp_path), tmp_path / "out", "--engine", "ray", "--ray-address", address)
    the_one_error(run, address, "ray start --head")
    assert time.monotonic() - started < 60
    assert not list((tmp_path / "out").glob("*.txt"))


def test_a_port_where_something_else_listens_is_one_line(tmp_path):
    """The wrong port: a server that is not Ray's (Ray's own driver would wait minutes on it)."""
    with socket.socket() as listener:
        listener.bind((HOST, 0))
        listener.listen(4)
        address = f"{HOST}:{listener.getsockname()[1]}"
        started = time.monotonic()
        run = transcribe(one_file(tmp_path), tmp_path / "out", "--engine", "ray", "--ray-address", address)
        the_one_error(run, address, "not a Ray cluster")
    assert time.monotonic() - started < 60


def test_a_cluster_gone_mid_run_is_one_line_and_what_was_written_stays_whole(cluster, tmp_path):
    address, _ = cluster
    out = tmp_path / "ray"
    run = transcribe(corpus_of(tmp_path), out, "--engine", "ray", "--ray-address", address,
                     "--ray-cpus-per-worker", "1", "--batch-size", "2")
    deadline = time.monotonic() + 600
    while not ((out / "results.jsonl").is_file() and (out / "results.jsonl").read_text()) and run.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    subprocess.run([RAY, "stop", "--force"], env=RAY_ENV, capture_output=True, timeout=60)
    stopped = time.monotonic()
    the_one_error(run, address, "went away mid-run")
    assert time.monotonic() - stopped < 40  # Ray's own driver would end the process after 60 s
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert rows and all((out / f"{row['output']}.txt").is_file() for row in rows)
    assert not list(out.rglob("*.tmp"))
