"""jax.numpy.sum on XLA's CPU backend for n >= 4096, and the two-input probe that says why its
revealed tree does not replay.

From n = 4096 (jaxlib 0.10.2) XLA hands a 1-D sum to a YNNPACK fusion ("__ynn_fusion" in the
compiled HLO; below 4096 it is XLA's own reduce-window tree, which replays bit for bit). That
kernel adds each tile of 1024 inputs with a fixed tree but joins the tiles with compensated
(Kahan) summation: with every input 0 except x0 = 2^-24 and x1024 = 1 + 2^-23 it returns
1 + 2^-23, which no tree of round-to-nearest additions returns (1 + 2^-22: the tie goes to even).
The probes see a tree, the replay fails, and :mod:`fpscope.reveal.compensation` names the cause.
"""

import numpy as np
import pytest

from fpscope.formats import FP16, FP32, FP64
from fpscope.reveal import RevealError, reveal
from fpscope.reveal.compensation import probe_two_inputs
from fpscope.targets.base import Target
from fpscope.targets.simulated import SimulatedSum
from fpscope.tree import SumTree
from fpscope.verify import DISTRIBUTIONS, random_inputs, same_bits

F = np.float32


class _Fn(Target):
    """A reduction from a Python function on a float32 vector."""

    name = "test.fn"

    def __init__(self, n, fn):
        super().__init__(n, FP32)
        self.fn = fn

    def _call_one(self, x):
        return float(self.fn(x))


def _tiled_kahan(tile):
    """Each tile of ``tile`` inputs added sequentially in float32; the tile sums joined by Kahan's
    compensated summation, finished with s - c (the order of the jax kernel, on one lane)."""

    def fn(x):
        s = c = F(0)
        for t in range(0, len(x), tile):
            b = F(0)
            for v in x[t : t + tile]:
                b = F(b + v)
            y = F(b - c)
            u = F(s + y)
            c = F(F(u - s) - y)
            s = u
        return F(s - c)

    return fn


# -- the two-input probe, without jax -------------------------------------------------------------


@pytest.mark.parametrize("acc, fin, fout", [(FP32, FP32, FP32), (FP64, FP32, FP32),
                                            (FP64, FP32, FP64), (FP32, FP16, FP32),
                                            (FP16, FP16, FP16), (FP64, FP64, FP64)])
def test_round_to_nearest_trees_pass_the_two_input_probe(acc, fin, fout):
    for tree in (SumTree.pairwise(33), SumTree.sequential(20), SumTree.reverse_sequential(9)):
        rep = probe_two_inputs(SimulatedSum(tree, acc=acc, in_format=fin, out_format=fout), tree)
        assert rep["probed"] == tree.n_nodes and rep["violations"] == 0, rep
        assert "rounded to nearest" in rep["summary"]


def test_two_input_probe_finds_compensated_tiles():
    n, tile = 64, 16
    tree = SumTree.sequential(n)  # what the order probes of this op show
    rep = probe_two_inputs(_Fn(n, _tiled_kahan(tile)), tree)
    assert rep["violations"] > 0
    ex = rep["examples"][0]
    assert ex["x_i"] == float(2.0**-24).hex() and ex["output"] == ex["x_j"]  # the tie went to odd
    assert ex["leaves"][0] < tile <= ex["leaves"][1]  # an earlier tile against a later one
    assert "compensated summation" in rep["summary"] and "1 + 2^-22" in rep["summary"]


def test_reveal_of_compensated_tiles_says_why_the_replay_fails():
    with pytest.raises(RevealError) as ei:
        reveal(_Fn(64, _tiled_kahan(16)), replay_samples=16)
    err = ei.value
    assert err.kind == "replay"
    assert "two-input probes: at" in str(err) and "compensated summation" in str(err)
    assert err.result.replay["two_input_probes"]["violations"] > 0


def test_plain_kahan_sum_is_named_too():
    def kahan(x):  # element-wise Kahan, no final correction (tests/test_reveal.py)
        s = c = F(0)
        for v in x:
            y = F(v - c)
            t = F(s + y)
            c = F(F(t - s) - y)
            s = t
        return s

    rep = probe_two_inputs(_Fn(24, kahan), SumTree.sequential(24))
    assert rep["violations"] > 0 and "compensated" in rep["summary"]


# -- jax --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jnp():
    pytest.importorskip("jax")
    import jax.numpy as jnp

    return jnp


def _jax_target(n):
    from fpscope.targets import make_target

    return make_target("jax.numpy.sum", n=n)


def test_jax_sum_batched_equals_single_calls(jnp):
    n = 4096
    t = _jax_target(n)
    rng = np.random.default_rng(0)
    X = np.concatenate([random_inputs(k, (8, n), FP32, rng) for k in DISTRIBUTIONS])
    direct = [float(jnp.sum(jnp.asarray(x.astype(F)))) for x in X]  # one 1-D call each
    assert same_bits(t.evaluate(X), direct).all()
    assert same_bits(t.evaluate_each(X), direct).all()


def test_jax_sum_rounds_a_tie_to_odd_across_tiles(jnp):
    # the op itself, whatever fpscope does: x0 = 2^-24, x1024 = 1 + 2^-23, the rest 0
    x = np.zeros(4096, dtype=F)
    x[0], x[1024] = 2.0**-24, 1 + 2.0**-23
    got = float(jnp.sum(jnp.asarray(x)))
    if got == 1 + 2.0**-22:
        pytest.skip("this jax rounds x0 + x1024 to nearest (no compensated tiles)")
    assert got == 1 + 2.0**-23
    y = x.copy()
    y[0], y[1024] = x[1024], x[0]  # the large term first: the tie goes to even
    assert float(jnp.sum(jnp.asarray(y))) == 1 + 2.0**-22


@pytest.mark.slow
@pytest.mark.parametrize("n", [4096, 8192])
def test_jax_sum_reveal_names_compensated_summation(jnp, n):
    t = _jax_target(n)
    try:
        res = reveal(t, replay_samples=25)
    except RevealError as err:
        assert err.kind == "replay"
        msg = str(err)
        assert "two-input probes: at" in msg and "compensated summation" in msg, msg
        two = err.result.replay["two_input_probes"]
        assert two["violations"] > 0
        assert any(e["output"] == e["x_j"] for e in two["examples"])
    else:  # a jax whose reduction is a plain tree again
        assert res.replay["bit_exact"]


@pytest.mark.slow
def test_jax_sum_without_the_ynn_fusion_replays_bit_exactly(jnp):
    from fpscope.targets import make_target
    from fpscope.targets.base import TargetError

    try:
        t = make_target("jax.numpy.sum", n=4096,
                        env={"XLA_FLAGS": "--xla_cpu_experimental_ynn_fusion_type="})
    except TargetError as exc:  # a jaxlib without the flag
        pytest.skip(str(exc))
    try:
        res = reveal(t, replay_samples=25)
    finally:
        t.close()
    assert res.replay["bit_exact"]
