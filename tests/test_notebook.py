"""The evaluation notebook runs from top to bottom (on a tiny subset), so it cannot rot."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "evaluation.ipynb"


@pytest.mark.real
def test_evaluation_notebook_executes(monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("faster_whisper")
    monkeypatch.setenv("WHISPERSPEC_NOTEBOOK_LIMIT", "2")
    monkeypatch.setenv("WHISPERSPEC_NOTEBOOK_MODEL", "tiny.en")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert any(o.output_type == "display_data" and "image/png" in o.get("data", {}) for o in outputs)
    assert any("faster-whisper:int8" in str(o.get("data", {}).get("text/markdown", "")) for o in outputs)
