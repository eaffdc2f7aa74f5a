"""The ``fpscope matrix`` report in a real browser: headless Chromium driven by Playwright.

Loads the generated index.html from disk (file://), checks that the tables and the tree pictures
render (row counts, non-empty SVG boxes), that the page asks for nothing over the network and logs
no errors, and saves a full-page screenshot to ``test-artifacts/matrix-report.png`` (repository
root; git-ignored).

Needs the Debian ``chromium`` package (or FPSCOPE_CHROMIUM=/path/to/chrome) and the ``playwright``
Python package; Playwright's own browser downloads are never used. Without them the test is
skipped locally, and fails in CI (CI=true), where .ci/run installs both.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fpscope.matrix import Block, run_matrix, suite_cells
from fpscope.report import write_report

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _chromium() -> str | None:
    env = os.environ.get("FPSCOPE_CHROMIUM")
    if env:
        return env if Path(env).is_file() else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _missing(reason: str):
    if IN_CI:
        pytest.fail(f"{reason}; CI must run the browser test (.ci/run installs it)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    exe = _chromium()
    if exe is None:
        _missing("no Chromium found (Debian: apt-get install chromium; or set FPSCOPE_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright package is not installed (pip install -e '.[test]')")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True,
                              args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("browser") / "m"
    blocks = (Block("sum", ("fp32", "fp16"), (8, 100)),
              Block("dot", ("fp32",), (16,), threads=(1, 2)),
              Block("matmul", ("fp32",), ((1, 32, 4), (2, 32, 4))))
    res = run_matrix(suite_cells(blocks, ["numpy"]), out, suite="browser test",
                     replay_samples=4, libraries=["numpy"],
                     notes=["torch skipped: not installed (browser test note)"])
    return res, write_report(res, out)


def test_report_renders_in_chromium(browser, report):
    res, index = report
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list = []
    remote: list = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("request", lambda req: None if req.url.startswith(("file:", "data:", "about:"))
            else remote.append(req.url))
    page.goto(index.resolve().as_uri(), wait_until="load")

    assert "fpscope matrix" in page.title()
    assert page.locator("table.cells tbody tr").count() == len(res.cells)
    assert page.locator("table.agreement tbody tr").count() == len(
        {(c.cell.op, c.cell.dtype, c.cell.shape, c.cell.layout) for c in res.cells})
    table = page.locator("table.cells").bounding_box()
    assert table and table["width"] > 600 and table["height"] > 50
    badges = page.locator("table.cells a.badge")
    assert badges.count() == len(res.cells)
    assert "same tree as #" in page.locator("table.cells").inner_text()
    assert page.locator("#environment dl.env dt").count() >= 4

    pictures = page.locator("svg.treesvg")
    if shutil.which("dot"):
        assert pictures.count() == len(res.trees)
        for k in range(pictures.count()):
            pictures.nth(k).scroll_into_view_if_needed()
            box = pictures.nth(k).bounding_box()
            assert box and box["width"] > 20 and box["height"] > 20, k
            # graphviz drew nodes inside it
            assert pictures.nth(k).locator("g.node").count() > 0
    else:
        assert page.locator("#trees .tree p.muted", has_text="no picture").count() == len(res.trees)

    # a badge in the table jumps to its tree card
    first = res.cells[0].tree_id
    page.locator(f"#cell-1 a.badge[href='#tree-{first}']").click()
    assert page.evaluate("location.hash") == f"#tree-{first}"

    assert errors == []
    assert remote == []  # works offline: no CDN, no fonts, no scripts from elsewhere
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "matrix-report.png"
    page.goto(index.resolve().as_uri())
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    print(f"screenshot of the report: {shot}")
    page.close()


_SANDY_CHILD = """
import sys
from fpscope.matrix import Block, run_matrix, suite_cells
from fpscope.report import write_report
suite = (Block("sum", ("fp32",), (64,)), Block("dot", ("fp32",), (64,)))
res = run_matrix(suite_cells(suite, ["numpy"]), sys.argv[1], replay_samples=4, libraries=["numpy"])
write_report(res, sys.argv[1])
"""


def test_fleet_report_renders_in_chromium(browser, tmp_path):
    """fleet.html of two workers whose OpenBLAS kernels differ (this process's core type and
    Sandybridge in a child process): the grid, the groups and the differences render."""
    import subprocess
    import sys

    from fpscope.fleet import write_fleet

    suite = (Block("sum", ("fp32",), (64,)), Block("dot", ("fp32",), (64,)))
    (tmp_path / "runs").mkdir()
    here = tmp_path / "runs" / "here"
    res = run_matrix(suite_cells(suite, ["numpy"]), here, replay_samples=4, libraries=["numpy"])
    write_report(res, here)
    sandy = tmp_path / "runs" / "sandy"
    env = dict(os.environ, OPENBLAS_CORETYPE="Sandybridge")
    child = subprocess.run([sys.executable, "-c", _SANDY_CHILD, str(sandy)], env=env,
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    write_fleet({"here": here, "sandy": sandy}, tmp_path / "fleet")
    page = browser.new_page(viewport={"width": 1200, "height": 800})
    errors: list = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto((tmp_path / "fleet" / "fleet.html").resolve().as_uri(), wait_until="load")
    grid = page.locator("#grid table")
    box = grid.bounding_box()
    assert box and box["width"] > 300 and box["height"] > 40
    assert grid.locator("tbody tr").count() == 2  # the two cells
    assert page.locator("#grid .badge").count() == 4  # two workers x two cells
    assert page.locator("#workers tbody tr").count() == 2
    text = page.locator("body").inner_text()
    assert "Sandybridge" in text
    if page.locator("#grid a.pill.diff").count():  # the dot cell split: its diff row is there
        page.locator("#grid a.pill.diff").first.click()
        assert page.evaluate("location.hash").startswith("#diff-")
    assert errors == []
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "fleet-report.png"), full_page=True)
    page.close()
