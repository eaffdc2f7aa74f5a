"""README's "Python API" section runs as written (its python blocks, in order, in a fresh
folder): the examples people copy must not be stale."""

import re
from pathlib import Path

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

