"""The notebooks run from top to bottom (on tiny subsets, few repeats), so they cannot rot."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def execute(name: str, timeout: int) -> list:
    """Run notebooks/`name` from top to bottom; the outputs of its code cells."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbclient.NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]


@pytest.mark.real
def test_evaluation_notebook_executes(monkeypatch):
    pytest.importorskip("faster_whisper")
    monkeypatch.setenv("WHISPERSPEC_NOTEBOOK_LIMIT", "2")
    monkeypatch.setenv("WHISPERSPEC_NOTEBOOK_MODEL", "tiny.en")
    outputs = execute("evaluation.ipynb", timeout=300)
    assert any(o.output_type == "display_data" and "image/png" in o.get("data", {}) for o in outputs)
    assert any("faster-whisper:int8" in str(o.get("data", {}).get("text/markdown", "")) for o in outputs)


@pytest.mark.real
def test_draft_ceiling_notebook_executes(monkeypatch):
    """The ranks -> chains and trees -> needed acceptance analysis behind the README's decode-phase notes."""
    monkeypatch.setenv("WHISPERSPEC_NOTEBOOK_REPEATS", "2")
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/markdown", ""))
                     for o in execute("draft_ceiling.ipynb", timeout=600))
    assert "6 clips" in text and "| rank of base's token | share |" in text
    assert "best chain: chain k=" in text and "best tree: tree depth" in text
    assert "| lookahead k | needed, this draft | needed, a free draft |" in text
