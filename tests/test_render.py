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
from families import (
    blocked_tree,
    fused_chain_tree,
    numpy_pairwise_sum_tree,
    random_tree,
    register_lanes_tree,
    seq_fold,
)
from fpscope.render import RenderError, render, render_bytes, to_dot, to_rich
from fpscope.summary import describe, phrase
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
    assert text.splitlines()[0] == "sum of x0..x15 (16 terms), depth 4"


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
    assert "▸ x0..x4095 (4096 terms): recursive split into 32 blocks, each 8 lanes" in text
    # level by level: all 16 sub-trees of one level are collapsed, none half-expanded
    collapsed = [line for line in text.splitlines() if "▸" in line]
    assert len(collapsed) == 16 and all("(4096 terms)" in line for line in collapsed)


# -- the root line, levels, chains, leaf sets ------------------------------------------------------
def test_rich_root_line_is_short_and_not_the_summary():
    t = numpy_pairwise_sum_tree(1024)
    lines = rich_text(t).splitlines()
    assert lines[0] == "sum of x0..x1023 (1024 terms), depth 21"
    assert phrase(describe(t), brief=True) not in lines[0] and "recursive split" not in lines[0]
    assert lines[1] == "├── + x0..x511 (512 terms)"  # the root's children follow directly
    assert rich_text(SumTree.reverse_sequential(50)).splitlines()[0] == (
        "running sum of 49 nodes over x0..x49 (50 terms), depth 49")
    assert rich_text(fused_chain_tree(16, 4)).splitlines()[0] == (
        "running sum of 4 nodes over x0..x15 (16 products) + C, depth 4")
    assert rich_text(SumTree(list(range(3000)))).splitlines()[0] == "sum of x0..x2999 (3000 terms), depth 1"
    assert rich_text(SumTree(0)).splitlines() == ["the single term x0 (no additions)"]


def test_rich_identical_lanes_are_drawn_identically():
    # numpy.sum, n = 100 (fp16 or fp32): eight 12-term lanes, each a running sum, at one level
    text = rich_text(numpy_pairwise_sum_tree(100))
    for r in range(8):
        assert (f"▸ running sum of 11 nodes over x{r}, x{r + 8}, ..., x{r + 88} (12 terms): "
                "sequential") in text, r
    assert "scattered" not in text and "x90\n" not in text
    assert sum("running sum of 11 nodes" in line for line in text.splitlines()) == 8


def test_rich_siblings_are_expanded_to_the_same_depth():
    text = rich_text(numpy_pairwise_sum_tree(1024))
    collapsed = [line for line in text.splitlines() if "▸" in line]
    assert len(collapsed) == 16
    assert all("(64 terms): 4 lanes of stride 8, combined pairwise" in line for line in collapsed)
    assert "▸ x[r + 8k] for r = 0..3, k = 0..15 (64 terms): 4 lanes of stride 8, combined pairwise" in text
    for n in list(range(2, 1200, 37)) + [4096, 5000]:
        lines = rich_text(numpy_pairwise_sum_tree(n)).splitlines()
        depths = {line.index("── ") for line in lines if "▸" in line}
        assert len(depths) <= 1, (n, depths)


def test_rich_chain_is_drawn_the_same_at_any_depth():
    # the same 12-term running sum at depth 1 and at depth 3: both as "running sum" (expanded or
    # collapsed whole), never split into a collapsed 11-term part plus one leaf
    deep = ((seq_fold(list(range(0, 12))), seq_fold(list(range(12, 24)))), seq_fold(list(range(24, 36))))
    t = SumTree((deep, seq_fold(list(range(36, 48)))))
    for max_lines in (8, 12, 20, 60):
        text = rich_text(t, max_lines=max_lines)
        assert "scattered" not in text
        for line in text.splitlines():
            if "(12 terms)" in line:
                assert "running sum of 11 nodes over" in line, (max_lines, line)
        assert len(text.splitlines()) <= max_lines


def test_rich_names_scattered_leaf_sets_by_their_real_indices():
    text = rich_text(register_lanes_tree(8192))
    assert "├── + x0, x4, ..., x8188 and x1, x5, ..., x8189 (4096 terms)" in text
    assert "+ x0, x8, ..., x8184 (1024 terms)" in text
    assert ("▸ x48, x112, ..., x8176 and x56, x120, ..., x8184 (256 terms): lanes 48 and 56 of "
            "stride 64, added") in text
    assert "▸ x[r + 64k] for r in {0, 8, 16, 24, 32, 40}, k = 0..127 (768 terms): 6 lanes of stride 64" in text
    assert "scattered" not in text and "other" not in text
    assert "stride 2," not in text and "stride 6," not in text  # no local ranks
    # a set that is no union of a few progressions keeps its range
    t = random_tree(300, np.random.default_rng(7))
    assert re.search(r"\d+ terms from x\d+\.\.x\d+", rich_text(t))


def test_rich_elided_steps_name_scattered_terms():
    lane = seq_fold(list(range(0, 400, 2)))  # a 200-term lane x0, x2, ..., x398 inside a sum
    t = SumTree((lane, seq_fold(list(range(1, 400, 2)))))
    text = rich_text(t, max_lines=60)
    assert "… 190 more steps adding 190 terms (x12, x14, ..., x390)" in text
    assert "… 190 more steps adding 190 terms (x13, x15, ..., x391)" in text


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
    assert "x0..x4095 (4096 terms) recursive split into 32 blocks, each 8 lanes, stride 8" in flat
    # a whole level is boxed: every box holds one of the 16 sub-trees of 4096 terms
    assert len(boxes) == 16 and src.count("(4096 terms)") == 16
    src = to_dot(SumTree.reverse_sequential(5000))
    assert len(src.splitlines()) < 200 and "sequential" in src


def test_dot_boxes_name_real_indices():
    src = to_dot(register_lanes_tree(8192))
    flat = " ".join(src.replace("\\n", " ").split())
    assert "x48, x112, ..., x8176 and x56, x120, ..., x8184 (256 terms) lanes 48 and 56 of stride 64, added" in flat
    assert "scattered" not in flat


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


def test_text_output_does_not_import_graphviz():
    """The graphviz package is imported where a picture is made, not by the text output."""
    import subprocess
    import sys

    code = ("import sys; from fpscope.render import to_rich; from fpscope.tree import SumTree; "
            "to_rich(SumTree.pairwise(8)); print('graphviz' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
