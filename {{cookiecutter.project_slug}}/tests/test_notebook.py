"""notebooks/reproducibility.ipynb runs top to bottom, as a student runs it: every cell, in a fresh
kernel, without an error (its cells assert what they show)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from {{ cookiecutter.project_slug }} import task

from conftest import SRC

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "reproducibility.ipynb"


@pytest.mark.skipif(not hasattr(task, "random_shift_contrast_noise"),
                    reason="the notebook's breaks show the example's augmentation and dropout, which task.py replaced")
def test_the_notebook_runs_top_to_bottom_and_every_cell_holds(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(SRC))  # the kernel is a fresh process: it finds the package here
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})  # the kernel's working folder
    client.execute()  # raises at the first cell that fails, naming it
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert len(code) > 5 and all(cell.execution_count for cell in code)  # every cell ran: none was skipped
