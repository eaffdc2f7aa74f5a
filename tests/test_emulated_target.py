"""The emulator as a black box: revealing an emulated tensor-core GEMM shows the preset's fused
nodes (issue 3: fan-in 5 / 9 / 17 on Volta / Ampere / Hopper fp16)."""

import pytest

from fpscope.cli import main
from fpscope.reveal import reveal
from fpscope.targets import TargetError, make_target
from fpscope.tree import SumTree


def _chain(K, L):
    """Blocks of L products, each fused with the running sum: [[[0..L-1], L..2L-1], ...]."""
    node = list(range(L))
    for s in range(L, K, L):
        node = [node, *range(s, s + L)]
    return SumTree.from_json(node)


@pytest.mark.parametrize("preset, K, L", [("volta-fp16", 16, 4), ("ampere-fp16", 32, 8),
                                          ("hopper-fp16", 48, 16), ("ampere-bf16", 16, 8)])
def test_revealed_tree_shows_the_fused_nodes(preset, K, L):
    target = make_target(f"emulate.matmul[{preset}]", shape=(4, K, 3))
    result = reveal(target, replay_samples=8)
    assert result.tree == _chain(K, L)
    fan_ins = sorted({len(node) for node in result.tree.nodes_postorder()})
    assert fan_ins == [L, L + 1]  # the first block alone, then L products + the running sum


def test_cli_reveal_of_an_emulated_gemm(capsys):
    rc = main(["reveal", "emulate.matmul[hopper-fp16]", "--shape", "2x32x2", "--format",
               "text"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "fused 17-term" in out


@pytest.mark.parametrize("name, kw, msg", [
    ("emulate.matmul[no-such-preset]", {"n": 16}, "unknown preset"),
    ("emulate.matmul", {"n": 16}, "needs a preset"),
    ("emulate.matmul[hopper-fp16]", {"n": 20}, "not a multiple"),
    ("emulate.matmul[hopper-fp16]", {"n": 16, "dtype": "bf16"}, "takes fp16 inputs"),
    ("emulate.matmul[hopper-e4m3]", {"n": 32}, "not supported"),
    ("emulate.matmul[hopper-fp16]", {"n": 16, "layout": "F"}, "no --layout"),
])
def test_bad_emulated_targets(name, kw, msg):
    with pytest.raises(TargetError, match=msg):
        make_target(name, **kw)
