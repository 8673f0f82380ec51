"""The demo as a person meets it: a real server on loopback, headless Chromium, and a load test."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT / "tests" / "data" / "tt-weasels.flac"
ARTIFACTS = Path(os.environ.get("WHISPERSPEC_ARTIFACTS", ROOT / "artifacts"))
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

pytestmark = pytest.mark.real


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("gradio")
    from whisperspec.demo import build_demo

    port = free_port()
    demo = build_demo("tiny.en", max_seconds=10)
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


def test_a_visitor_uploads_the_sample_and_sees_transcript_and_tokens(server):
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).is_file():
        pytest.skip("headless Chromium is not installed: sudo apt-get install chromium")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server)
        page.locator("input[type=file]").first.set_input_files(str(CLIP))
        page.wait_for_timeout(1500)  # the upload reaches the server
        page.locator("#transcribe").click()
        transcript = page.locator("#transcript textarea")
        page.wait_for_function("() => document.querySelector('#transcript textarea').value.length > 5",
                               timeout=120_000)
        assert "phone system" in transcript.input_value().lower()
        page.wait_for_selector("#token-view .ws-tok", timeout=30_000)
        assert page.locator("#token-view .ws-draft").count() > 1  # legend + drafted tokens
        assert "identical" in page.locator("#stats").inner_text()
        page.screenshot(path=str(ARTIFACTS / "demo.png"), full_page=True)
        browser.close()


def test_twenty_concurrent_requests_all_get_answers(server):
    client_module = pytest.importorskip("gradio_client")
    started = time.monotonic()

    def one_request(index: int):
        client = client_module.Client(server, verbose=False)
        draft = ["int8", "none", "ngram", "early-exit"][index % 4]
        compute_type = ["float32", "int8"][index // 4 % 2]
        return client.predict(client_module.handle_file(str(CLIP)), "tiny.en", draft, "4", "", "transcribe",
                              False, compute_type, api_name="/run")

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(one_request, range(20), timeout=300))
    failures = [r for r in results if "phone system" not in r[0].lower()]
    assert not failures and len(results) == 20
    assert time.monotonic() - started < 300
    assert threading.active_count() < 200


def test_hostile_uploads_beside_normal_requests(server, tmp_path):
    """A '1 Hz' WAV (hours once resampled), noise over the limit, an empty file, text and NaN
    samples, each beside normal requests: the hostile ones get one-line errors, the normal ones
    their transcripts, and the server stays up."""
    import wave

    import numpy as np
    import soundfile as sf

    client_module = pytest.importorskip("gradio_client")
    with wave.open(str(tmp_path / "one-hertz.wav"), "wb") as file:
        file.setnchannels(1), file.setsampwidth(2), file.setframerate(1)
        file.writeframes(np.zeros(14000, dtype=np.int16).tobytes())
    sf.write(tmp_path / "noise.flac", np.random.default_rng(0).normal(0, 0.01, 16000 * 12).astype(np.float32), 16000)
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "text.wav").write_text("not audio\n" * 100)
    sf.write(tmp_path / "nan.wav", np.full(16000, np.nan, dtype=np.float32), 16000, subtype="FLOAT")
    hostile = {"one-hertz.wav": "not a plausible audio rate", "noise.flac": "too long", "empty.wav": "empty",
               "text.wav": "cannot be decoded", "nan.wav": "NaN"}

    def one_request(path: Path):
        client = client_module.Client(server, verbose=False)
        try:
            return client.predict(client_module.handle_file(str(path)), "tiny.en", "int8", "3", "", "transcribe",
                                  False, "float32", api_name="/run")[0]
        except Exception as error:  # gradio_client raises AppError carrying the page's message
            return f"ERROR {error}"

    paths = [tmp_path / name for name in hostile] + [CLIP] * 5
    with ThreadPoolExecutor(max_workers=len(paths)) as pool:
        answers = dict(zip([p.name + str(i) for i, p in enumerate(paths)], pool.map(one_request, paths, timeout=300)))
    for (key, answer), path in zip(answers.items(), paths):
        if path == CLIP:
            assert "phone system" in answer.lower(), answer
        else:
            assert answer.startswith("ERROR") and hostile[path.name] in answer and str(tmp_path) not in answer, answer
    assert "phone system" in one_request(CLIP).lower()  # still serving


def test_a_stopped_demo_leaves_no_visitor_transcripts(tmp_path):
    """SIGTERM (a service manager stopping it): the folder of result files goes with the server."""
    import glob
    import signal
    import subprocess
    import sys
    import urllib.request

    client_module = pytest.importorskip("gradio_client")
    port = free_port()
    before = set(glob.glob("/tmp/whisperspec-demo-*"))
    server = subprocess.Popen([sys.executable, "-m", "whisperspec.cli", "demo", "--port", str(port),
                               "--models", "tiny.en"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "the demo did not start"
                time.sleep(0.5)
        client = client_module.Client(f"http://127.0.0.1:{port}/", verbose=False)
        text = client.predict(client_module.handle_file(str(CLIP)), "tiny.en", "none", "3", "", "transcribe",
                              False, "float32", api_name="/run")[0]
        assert "phone system" in text.lower()
        made = set(glob.glob("/tmp/whisperspec-demo-*")) - before
        assert made and all(os.listdir(folder) for folder in made)  # the request's result files
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 128 + signal.SIGTERM
        assert not [folder for folder in made if os.path.exists(folder)]
    finally:
        server.kill()
