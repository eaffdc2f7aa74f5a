"""README's "Python API" section runs as written (its python blocks, in order, in a fresh
folder): the examples people copy must not be stale."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _section_blocks(title: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end >= 0 else None]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_python_api_section_runs(tmp_path, monkeypatch, capsys):
    blocks = _section_blocks("Python API")
    assert blocks, "README has no python block in its Python API section"
    monkeypatch.chdir(tmp_path)
    scope: dict = {"__name__": "__readme__"}
    for code in blocks:
        exec(compile(code, str(README), "exec"), scope)
    out = capsys.readouterr().out
    assert "different tree" in out
    assert (tmp_path / "sum.json").is_file()
    assert out.count("True") >= 3



@pytest.mark.slow
def test_qualify_a_cluster_python_block_runs_as_a_script(tmp_path):
    """The LocalCluster example, saved as a file and run with python (its workers are new
    processes that import the main module: the block must guard itself)."""
    pytest.importorskip("distributed")
    (code,) = _section_blocks("Qualify a cluster: which machines add the same way")
    script = tmp_path / "fleet_example.py"
    script.write_text(code, encoding="utf-8")
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    folder = tmp_path / "fleet-local"
    assert (folder / "fleet.json").is_file() and (folder / "fleet.html").is_file()
    fleet = json.loads((folder / "fleet.json").read_text())
    assert len(fleet["workers"]) == 2 and fleet["cells"]
