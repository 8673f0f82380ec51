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
    demo = build_demo("tiny.en")
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
