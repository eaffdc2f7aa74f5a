"""Tests for fpscope.render: rich output, DOT source, SVG/PNG files, overwrite protection."""

from __future__ import annotations

import io
import re
import shutil
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst
from rich.console import Console

import fpscope.render as render_mod
from families import blocked_tree, fused_chain_tree, numpy_pairwise_sum_tree, random_tree
from fpscope.render import RenderError, render, render_bytes, to_dot, to_rich
from fpscope.tree import SumTree

HAVE_DOT = shutil.which("dot") is not None
needs_dot = pytest.mark.skipif(not HAVE_DOT, reason="Graphviz 'dot' program not installed")

LEAF_RE = re.compile(r"^\s*x(\d+|C) \[", re.M)
OP_RE = re.compile(r'^\s*n\d+ \[label="\+(\d*)"', re.M)
BOX_RE = re.compile(r"^\s*b\d+ \[", re.M)
EDGE_RE = re.compile(r"^\s*\w+ -> \w+", re.M)


def rich_text(tree: SumTree, width: int = 120, **kw) -> str:
    con = Console(file=io.StringIO(), width=width, color_system=None)
    con.print(to_rich(tree, **kw))
    return con.file.getvalue()


# -- rich ---------------------------------------------------------------------------------------
def test_rich_small_tree_shows_every_leaf():
    text = rich_text(SumTree.pairwise(16))
    for i in range(16):
        assert re.search(rf"\bx{i}\b", text), i
    assert text.splitlines()[0].startswith("SumTree n=16, depth 4: pairwise")


def test_rich_chain_is_flattened_and_elided():
    text = rich_text(SumTree.reverse_sequential(5000))
    lines = text.splitlines()
    assert len(lines) < 20
    assert "running sum of 4999 nodes over x0..x4999 (5000 terms)" in text
    assert "start: + x4998 x4999" in text
    assert "… 4990 more steps adding 4990 terms (x4..x4993)" in text
    assert lines[-1].endswith("+ x0")


def test_rich_fused_chain_marks_fused_nodes_and_c():
    text = rich_text(fused_chain_tree(16, 4))
    assert "start: +5 C x0 x1 x2 x3" in text
    assert "+5 x12 x13 x14 x15" in text


@pytest.mark.parametrize(
    "tree",
    [
        numpy_pairwise_sum_tree(65536),
        SumTree.reverse_sequential(100_000),
        blocked_tree(65536, 256, "pairwise"),
        random_tree(5000, np.random.default_rng(1), max_fan_in=3, with_c=True),
        SumTree(list(range(3000))),  # one fused 3000-term node
    ],
    ids=["numpy65536", "reverse100000", "blocked", "random5000", "fused3000"],
)
def test_rich_big_trees_stay_short(tree):
    for width in (80, 120):
        text = rich_text(tree, width=width)
        lines = text.splitlines()
        assert len(lines) < 60, (width, len(lines))
        assert max(len(line) for line in lines) <= width


def test_rich_collapsed_subtrees_name_their_shape():
    text = rich_text(numpy_pairwise_sum_tree(65536))
    assert "▸ x0..x2047 (2048 terms): recursive split into 16 blocks, each 8 lanes" in text


# -- DOT ----------------------------------------------------------------------------------------
def test_dot_small_tree_structure():
    src = to_dot(fused_chain_tree(10, 4))
    assert "digraph sumtree {" in src
    leaves = LEAF_RE.findall(src)
    assert sorted(leaves, key=str) == sorted([str(i) for i in range(10)] + ["C"], key=str)
    ops = OP_RE.findall(src)
    assert sorted(ops) == ["3", "5", "5"]  # +5, +5, +3: fused nodes are labelled with fan-in
    assert 'label=C color=red' in src
    assert len(EDGE_RE.findall(src)) == 11 + 3 - 1
    assert "dir=back" in src  # parent -> child edges, arrowheads at the parent


def test_dot_binary_labels():
    src = to_dot(SumTree.sequential(4))
    assert OP_RE.findall(src) == ["", "", ""]
    assert len(LEAF_RE.findall(src)) == 4


@settings(max_examples=80, deadline=None)
@given(n=hst.integers(1, 300), seed=hst.integers(0, 2**32 - 1), fan=hst.integers(2, 4),
       with_c=hst.booleans())
def test_dot_has_exactly_one_node_per_leaf(n, seed, fan, with_c):
    t = random_tree(n, np.random.default_rng(seed), max_fan_in=fan, with_c=with_c)
    src = to_dot(t)
    leaves = LEAF_RE.findall(src)
    ints = sorted(int(x) for x in leaves if x != "C")
    assert ints == list(range(n))
    assert leaves.count("C") == int(with_c)
    assert len(OP_RE.findall(src)) == t.n_nodes
    assert not BOX_RE.findall(src)
    assert len(EDGE_RE.findall(src)) == n + int(with_c) + t.n_nodes - 1


def test_dot_large_tree_is_collapsed():
    src = to_dot(numpy_pairwise_sum_tree(65536))
    boxes = BOX_RE.findall(src)
    assert 4 <= len(boxes) <= 48
    assert len(src.splitlines()) < 200
    flat = " ".join(src.replace("\\n", " ").split())
    assert "x0..x2047 (2048 terms) recursive split into 16 blocks, each 8 lanes, stride 8" in flat
    src = to_dot(SumTree.reverse_sequential(5000))
    assert len(src.splitlines()) < 200 and "sequential" in src


# -- files --------------------------------------------------------------------------------------
@needs_dot
def test_svg_is_valid_and_has_leaf_labels():
    data = render_bytes(SumTree.pairwise(12), "svg")
    root = ET.fromstring(data)
    assert root.tag.endswith("svg")
    texts = {el.text for el in root.iter() if el.tag.endswith("text")}
    assert {str(i) for i in range(12)} <= texts
    assert "+" in texts


@needs_dot
def test_png_magic():
    data = render_bytes(fused_chain_tree(16, 4), "png")
    assert data.startswith(b"\x89PNG\r\n\x1a\n")


@needs_dot
@pytest.mark.parametrize("fmt", ["svg", "png", "dot"])
def test_render_writes_and_never_overwrites(tmp_path, fmt):
    t = numpy_pairwise_sum_tree(40)
    path = tmp_path / f"tree.{fmt}"
    assert render(t, path) == path
    first = path.read_bytes()
    assert first
    with pytest.raises(RenderError, match="already exists"):
        render(SumTree.sequential(3), path, fmt)
    assert path.read_bytes() == first
    render(SumTree.sequential(3), path, fmt, overwrite=True)
    assert path.read_bytes() != first


def test_render_dot_works_without_graphviz(tmp_path, monkeypatch):
    monkeypatch.setattr(render_mod.shutil, "which", lambda name: None)
    out = render(SumTree.sequential(5), tmp_path / "t.dot")
    assert out.read_text().count("->") == 8
    with pytest.raises(RenderError) as exc:
        render(SumTree.sequential(5), tmp_path / "t.svg")
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg == (
        "the Graphviz 'dot' program is not installed; install it (Debian: apt-get install "
        "graphviz) or use --format dot"
    )
    assert not (tmp_path / "t.svg").exists()
    with pytest.raises(RenderError, match="not installed"):
        render_bytes(SumTree.sequential(5), "png")


def test_render_rejects_unknown_formats(tmp_path):
    with pytest.raises(RenderError, match="cannot tell the format"):
        render(SumTree.sequential(3), tmp_path / "tree.txt")
    with pytest.raises(RenderError, match="unknown format"):
        render(SumTree.sequential(3), tmp_path / "tree.svg", "pdf")
    with pytest.raises(RenderError, match="unknown format"):
        render_bytes(SumTree.sequential(3), "jpg")
    assert render_bytes(SumTree.sequential(3), "dot").startswith(b"//")
