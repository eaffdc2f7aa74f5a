"""FPRev and BasicFPRev on targets with known trees, and the checks that must fire."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from families import (
    blocked_tree,
    fused_chain_tree,
    numpy_pairwise_sum_tree,
    random_tree,
    strided_lanes_tree,
)
from fpscope.formats import BF16, FP16, FP32, FP64
from fpscope.masks import Mask, MaskError, choose_mask
from fpscope.reveal import RevealError, lca_sizes_of_tree, reveal
from fpscope.targets import make_target
from fpscope.targets.base import Target
from fpscope.targets.simulated import SimulatedMatmul, SimulatedSum
from fpscope.tree import SumTree


def _roundtrip(tree, **kw):
    res = reveal(SimulatedSum(tree, fused_frac_bits=24), **kw)
    assert res.tree == tree, f"revealed {res.tree} for {tree}"
    return res


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 9, 31, 100])
def test_sequential_and_pairwise(n):
    _roundtrip(SumTree.sequential(n))
    _roundtrip(SumTree.pairwise(n))
    _roundtrip(SumTree.reverse_sequential(n))


def test_families():
    for tree in (
        numpy_pairwise_sum_tree(300),
        strided_lanes_tree(100, 8),
        strided_lanes_tree(77, 4, combine="sequential"),
        blocked_tree(96, 16, "pairwise"),
    ):
        _roundtrip(tree)


def test_fused_nodes_are_revealed():
    tree = fused_chain_tree(16, 4, with_c=False)
    assert tree.max_fan_in() == 5 or tree.max_fan_in() == 4
    _roundtrip(tree)


def test_reverse_sequential_5000_costs_about_n_probes():
    tree = SumTree.reverse_sequential(5000)
    res = _roundtrip(tree)
    assert res.stats.probes <= 3 * 5000  # the published pivot rule needs n(n-1)/2


def test_sequential_costs_n_probes():
    res = _roundtrip(SumTree.sequential(2000), candidates=None)  # FPRev's own cost
    assert res.stats.probes <= 2000 + 200
    # proven as a candidate instead: the screen (48 nodes of each of 3 candidates), n - 1
    # node probes, the checks
    res = _roundtrip(SumTree.sequential(2000))
    assert res.stats.checks["candidate"].startswith("a sequential sum")
    assert res.stats.probes <= 3 * 48 + 1999 + 200


def test_random_permuted_chain_near_linear():
    rng = np.random.default_rng(3)
    order = rng.permutation(3000).tolist()
    acc = order[0]
    for leaf in order[1:]:
        acc = [acc, leaf]
    res = _roundtrip(SumTree(acc))
    assert res.stats.probes <= 6 * 3000


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 300), st.integers(0, 2**32 - 1), st.sampled_from([2, 2, 3, 5]))
def test_random_trees(n, seed, fan):
    tree = random_tree(n, np.random.default_rng(seed), max_fan_in=fan)
    _roundtrip(tree)


def _one_three_way_node(n: int, rng) -> SumTree:
    """A random binary tree over n leaves with one node given a third child (a fused node)."""
    base = random_tree(n - 1, rng, max_fan_in=2)
    nodes = [nd for nd in base.nodes_postorder() if nd is not base.root]
    target = nodes[int(rng.integers(len(nodes)))] if nodes else base.root

    def rebuild(x):
        if not isinstance(x, tuple):
            return x
        kids = [rebuild(c) for c in x]
        return kids + [n - 1] if x is target else kids

    return SumTree(rebuild(base.root))


@settings(max_examples=30, deadline=None)
@given(st.integers(8, 200), st.integers(0, 2**32 - 1))
def test_packed_probes_prove_binary_trees(n, seed):
    """Binary trees are revealed with packed probes alone (no per-node recheck); with a single
    3-way node anywhere the tree is still revealed exactly."""
    rng = np.random.default_rng(seed)
    binary = random_tree(n, rng, max_fan_in=2)
    res = _roundtrip(binary)
    assert res.stats.checks.get("packed_probes", "ok") == "ok"
    fused = _one_three_way_node(n, rng)
    assert fused.max_fan_in() == 3
    _roundtrip(fused)  # a stage with one set probes it plainly, which resolves the node too


def test_guard_leaf_catches_a_three_way_node():
    """The packed stage that probes the set {3, 4} (two children of a 3-way node) reads the
    guard's field as 0 and says so."""
    from fpscope.reveal import Prober, fprev

    tree = SumTree([[[[[0, 1], 2], [3, 4, [5, 6]]], [[7, 8], [9, 10]]], [11, [12, [13, 14]]]])
    target = SimulatedSum(tree, fused_frac_bits=24)
    prober = Prober(target, choose_mask(target.n, target.in_format, target.out_format))
    with pytest.raises(RevealError, match="guard leaf") as exc:
        fprev(prober, packed=True)
    assert exc.value.kind == "inconsistent"
    assert SumTree.from_canonical(fprev(Prober(target, prober.mask)), 15) == tree


@settings(max_examples=15, deadline=None)
@given(st.integers(2, 40), st.integers(0, 2**32 - 1))
def test_basic_agrees_with_fprev(n, seed):
    tree = random_tree(n, np.random.default_rng(seed), max_fan_in=3)
    assert _roundtrip(tree, algorithm="basic").tree == _roundtrip(tree).tree


@pytest.mark.parametrize("fmt", [FP64, FP32, FP16, BF16])
def test_low_precision_formats(fmt):
    tree = numpy_pairwise_sum_tree(200)
    res = reveal(SimulatedSum(tree, acc=FP32 if fmt in (FP16, BF16) else fmt, in_format=fmt, out_format=fmt))
    assert res.tree == tree


def test_lca_sizes_of_tree_matches_matrix():
    tree = random_tree(60, np.random.default_rng(0), max_fan_in=3)
    L = tree.lca_size_matrix()
    pairs = np.array([(i, j) for i in range(60) for j in range(60) if i != j])
    assert np.array_equal(lca_sizes_of_tree(tree, pairs), L[pairs[:, 0], pairs[:, 1]])


# -- matrix ops -------------------------------------------------------------------------------


@pytest.mark.parametrize("rows,cols", [(64, 64), (1, 64), (64, 1), (5, 9)])
def test_matrix_batched_probing(rows, cols):
    tree = numpy_pairwise_sum_tree(64)
    res = reveal(SimulatedMatmul(tree, rows, cols))
    assert res.tree == tree


def test_square_matrix_needs_few_calls():
    tree = SumTree.sequential(128)
    res = reveal(SimulatedMatmul(tree, 128, 128))
    assert res.tree == tree
    assert res.stats.calls <= 16  # one GEMM answers every pair


def test_outputs_with_different_k_order_are_reported():
    base = SumTree.pairwise(32)
    other = SumTree.sequential(32)

    # columns 30 and 31 (an edge tile) use another K-order: found by the batched grid, then every
    # tree among the outputs is revealed with its positions (reveal/classes.py)
    res = reveal(SimulatedMatmul(base, 2, 32, tree_for=lambda r, c: other if c >= 30 else base))
    assert res.tree == base
    note = res.stats.checks["shared_k_order_outputs"]
    assert note.startswith("no:") and "output (0, 0)" in note
    assert [c["tree"] for c in res.classes] == [base, other]
    assert np.array_equal(np.argwhere(res.classes[1]["mask"])[:, 1], [30, 31, 30, 31])

    # one odd output: its own class, at its position
    res = reveal(SimulatedMatmul(base, 4, 2, tree_for=lambda r, c: other if (r, c) == (3, 1) else base))
    assert res.tree == base
    assert [c["tree"] for c in res.classes] == [base, other]
    assert np.argwhere(res.classes[1]["mask"]).tolist() == [[3, 1]]

    # output (0, 0) itself differs from the rest: its own tree is the record's tree
    res = reveal(SimulatedMatmul(base, 4, 4, tree_for=lambda r, c: other if (r, c) == (0, 0) else base))
    assert res.tree == other
    assert np.argwhere(res.classes[0]["mask"]).tolist() == [[0, 0]]


# -- checks that must fire ----------------------------------------------------------------------


class _Fn(Target):
    """A reduction from a Python function on a float32 vector."""

    name = "test.fn"

    def __init__(self, n, fn, fmt=FP32):
        super().__init__(n, fmt)
        self.fn = fn

    def _call_one(self, x):
        return float(self.fn(x))


def test_nondeterministic_target_is_refused():
    rng = np.random.default_rng(0)

    def shuffled_sum(x):
        acc = np.float32(0)
        for v in x[rng.permutation(len(x))]:
            acc = np.float32(acc + v)
        return acc

    with pytest.raises(RevealError) as ei:
        reveal(_Fn(64, shuffled_sum))
    assert ei.value.kind in ("nondeterministic", "inconsistent")


def test_kahan_sum_is_refused():
    from families import kahan_sum as kahan

    with pytest.raises(RevealError) as ei:
        reveal(_Fn(40, kahan))
    assert ei.value.kind in ("not-units", "inconsistent", "mask", "replay")


def test_too_small_mask_is_refused():
    tree = numpy_pairwise_sum_tree(100)
    with pytest.raises(RevealError) as ei:
        reveal(SimulatedSum(tree), mask=Mask(M=2.0**20, u=1.0))
    assert ei.value.kind in ("not-units", "inconsistent", "mask")


def test_fp64_accumulation_of_fp16_inputs_is_refused():
    # a float16 reduction that accumulates in float64: no float16 mask can absorb its units
    tree = SumTree.pairwise(50)
    with pytest.raises(RevealError):
        reveal(SimulatedSum(tree, acc=FP64, in_format=FP16, out_format=FP64))


def test_narrow_accumulator_cannot_count():
    # a bf16 accumulator stalls at 256 units (case C6); n = 300 needs exact counts up to 298
    tree = SumTree.sequential(300)
    with pytest.raises((RevealError, MaskError)):
        reveal(SimulatedSum(tree, acc=BF16, in_format=BF16, out_format=FP32))


def test_mask_limits():
    assert choose_mask(2050, FP16, FP16).u == 2.0**-24
    with pytest.raises(MaskError, match="too large"):
        choose_mask(2051, FP16, FP16)
    with pytest.raises(MaskError, match="too large"):
        choose_mask(300, BF16, BF16)
    assert choose_mask(2**20, FP32, FP32) == Mask(2.0**127, 1.0)


def test_raising_target_is_reported():
    from fpscope.targets.base import TargetError

    def boom(x):
        raise ZeroDivisionError("nope")

    with pytest.raises(TargetError, match="ZeroDivisionError: nope"):
        reveal(_Fn(8, boom))


def test_fprev_reports_inconsistent_sizes():
    class Liar(SimulatedSum):
        def evaluate(self, X):
            out = super().evaluate(X)
            return np.where(out == 3.0, 4.0, out)  # one class of answers is off by one unit

    with pytest.raises(RevealError):
        reveal(Liar(SumTree.sequential(12)))


# -- membership probes and packed fields ----------------------------------------------------------


def _packed_fprev(tree, membership_min, seed=0):
    """Packed FPRev on a simulated sum of ``tree``: (revealed tree, prober, target)."""
    from fpscope.reveal import Prober, fprev

    target = SimulatedSum(tree, fused_frac_bits=24)
    prober = Prober(target, choose_mask(target.n, target.in_format, target.out_format))
    nested = fprev(prober, seed=seed, packed=True, membership_min=membership_min)
    return SumTree.from_canonical(nested, target.n), prober, target


def _family_tree(name: str, n: int, rng) -> SumTree:
    if name == "random":
        return random_tree(n, rng, max_fan_in=2)
    if name == "numpy":
        return numpy_pairwise_sum_tree(n)
    if name == "lanes":
        combine = str(rng.choice(["pairwise", "sequential"]))
        return strided_lanes_tree(n, int(rng.integers(2, 17)), combine=combine)
    inner = str(rng.choice(["sequential", "reverse", "pairwise", "numpy"]))
    return blocked_tree(n, int(rng.integers(8, n // 2)), inner)


@settings(max_examples=24, deadline=None)
@given(st.sampled_from(["random", "numpy", "lanes", "blocked"]), st.integers(200, 2000),
       st.integers(0, 2**32 - 1), st.sampled_from([4, 16, 64]))
def test_membership_probes_reveal_binary_trees(family, n, seed, membership_min):
    """With membership probes allowed on small sets, every binary tree comes out exactly (levels
    hidden between the sampled ones included: random trees hide many)."""
    tree = _family_tree(family, n, np.random.default_rng(seed))
    got, prober, _ = _packed_fprev(tree, membership_min, seed=seed % 1000)
    assert got == tree
    assert prober.membership_sets > 0 or family != "numpy"


def _hidden_leaf_tree() -> SumTree:
    """((A + x) + B): A, B pairwise sums of 600 leaves each and x = 1200, which lies at no
    power-of-two rank from the pivot 0 and so is no rank-offset sample."""
    from families import pairwise_split

    a, b = pairwise_split(list(range(600))), pairwise_split(list(range(600, 1200)))
    return SumTree(((a, 1200), b))


def test_membership_finds_a_hidden_single_leaf_level():
    """The root's samples meet A's levels and B's but not x (seed 0: no random draw hits it), so
    x hides in the interval below B's level; the interval set, pivoted in B, sees x clear its
    guard bit and places it from the root's pivot."""
    tree = _hidden_leaf_tree()
    got, prober, _ = _packed_fprev(tree, 512, seed=0)
    assert got == tree
    assert prober.membership_sets > 0 and prober.hidden_leaves >= 1


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_membership_hidden_level_any_seed(seed):
    assert _packed_fprev(_hidden_leaf_tree(), 512, seed=seed)[0] == _hidden_leaf_tree()


def _three_way(where: str) -> SumTree:
    """numpy's tree of 1024 leaves with one node given a third child: at the root (a set that
    membership probes classify) or inside the 512-leaf right half (an interval set)."""
    left, right = numpy_pairwise_sum_tree(1024).root
    if where == "root":
        return SumTree((left, *right))
    rl, rr = right
    return SumTree((left, (rl, *rr)))


@pytest.mark.parametrize("where", ["root", "inside"])
def test_membership_three_way_node_falls_back(where):
    tree = _three_way(where)
    assert tree.max_fan_in() == 3
    with pytest.raises(RevealError) as exc:
        _packed_fprev(tree, 512)
    assert exc.value.kind == "inconsistent"
    res = _roundtrip(tree)
    assert res.stats.checks["packed_probes"].startswith("fell back")


def test_membership_probes_halve_numpy_sum_rows():
    """numpy's pairwise sum of 2048 leaves: membership probes take at most 60% of the rows that
    count probes alone take (the rows of a SimulatedSum are its calls)."""
    tree = numpy_pairwise_sum_tree(2048)
    counted, _, plain = _packed_fprev(tree, tree.n + 1)
    got, prober, target = _packed_fprev(tree, 512)
    assert counted == tree and got == tree
    assert prober.membership_sets > 0
    assert target.calls <= 0.6 * plain.calls


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 13), st.integers(1, 300), st.integers(0, 4), st.booleans()),
                min_size=1, max_size=40))
def test_packed_fields_share_no_row(reqs):
    """Every probe gets one row of one field; the fields of each row fit in 24 bits without
    overlapping (fields of different bands share bits, never rows); no row holds a request
    twice (one pivot a row) or two requests of a family with an exclusive member."""
    from fpscope.reveal.packing import _assign_slots

    widths, lengths, families, exclusive = (list(c) for c in zip(*reqs))
    slots = _assign_slots(widths, lengths, families, exclusive, 24)
    rows: dict = {}
    bits: dict = {}  # row -> bits its fields use
    probes = {i: [] for i in range(len(reqs))}
    for width, offset, turns in slots:
        assert 0 <= offset and offset + width <= 24
        field = ((1 << width) - 1) << offset
        for i, r0, ln, p0 in turns:
            assert widths[i] <= width
            probes[i].extend(range(p0, p0 + ln))
            for r in range(r0, r0 + ln):
                rows.setdefault(r, []).append(i)
                assert not bits.get(r, 0) & field  # one request a field a row, fields apart
                bits[r] = bits.get(r, 0) | field
    assert all(sorted(p) == list(range(lengths[i])) for i, p in probes.items())
    serial = {f for f, e in zip(families, exclusive) if e}
    for held in rows.values():
        assert len(held) == len(set(held))
        fams = [families[i] for i in held if families[i] in serial]
        assert len(fams) == len(set(fams))


def test_grid_sizes_match_to_lca_sizes():
    """Prober.grid_sizes (one cast, no pairs built) gives to_lca_sizes' l values, and None
    exactly where to_lca_sizes raises."""
    from fpscope.reveal import Prober

    tree = SumTree.pairwise(16)
    target = SimulatedMatmul(tree, 16, 16)
    rng = np.random.default_rng(2)
    for u in (1.0, 2.0**-24):
        prober = Prober(target, Mask(2.0**100, u))
        n = prober.n
        for trial in range(200):
            prow, ccol = rng.integers(0, n, 6), rng.integers(0, n, 5)
            valid = prow[:, None] != ccol[None, :]
            out = rng.integers(0, n - 1, (6, 5)).astype(np.float64) * u
            out[~valid] = -2.0**200  # the overflowed product of the diagonal: never read
            if trial % 2:
                out[rng.integers(0, 6), rng.integers(0, 5)] = [np.nan, np.inf, 0.5 * u, -u, (n - 1) * u,
                                                               2.0**127][trial % 6]
            rr, cc = np.meshgrid(prow, ccol, indexing="ij")
            try:
                want = np.full(out.shape, -1, dtype=np.int64)
                want[valid] = prober.to_lca_sizes(out[valid], np.stack([rr[valid], cc[valid]], axis=1))
            except RevealError:
                want = None
            got = prober.grid_sizes(out, valid)
            assert (got is None) == (want is None)
            if got is not None:
                assert np.array_equal(got, want)


def test_banded_slots_pack_mixed_widths_in_fewer_rows():
    """Requests of widths 13 down to 2 (packed sets of 2^12 to 2 leaves): bands of widths take
    fewer rows than one band of fields as wide as their widest request."""
    from fpscope.reveal.packing import _assign_slots, _band_slots

    rng = np.random.default_rng(0)
    widths = [int(w) for w in rng.integers(2, 14, 200)]
    lengths = [int(rng.integers(1, (1 << (w - 1)) + 1)) for w in widths]
    families = [int(f) for f in rng.integers(0, 30, 200)]
    exclusive = [bool(e) for e in rng.random(200) < 0.1]
    rows = max(r + k for sl in _assign_slots(widths, lengths, families, exclusive, 24)
               for _, r, k, _ in sl[2])
    serial = {f for f, e in zip(families, exclusive) if e}
    one, _ = _band_slots(list(range(200)), widths, lengths, families, serial, 24)
    assert rows < 0.9 * one


def _band_slots_reference(idx, widths, lengths, families, serial, B):
    """McNaughton's rule with numpy (the packer before bands): T and the fields."""
    fam: dict = {}
    for i in idx:
        fam.setdefault(families[i], []).append(i)
    units = []
    for f, ids in fam.items():
        if f in serial:
            ids = sorted(ids, key=lambda i: -widths[i])
            units.append((widths[ids[0]], sum(lengths[i] for i in ids), ids))
        else:
            units.extend((widths[i], lengths[i], [i]) for i in ids)
    units.sort(key=lambda un: (-un[0], -un[1]))
    seq = [i for _, _, ids in units for i in ids]
    w = np.array([widths[i] for i in seq])
    end = np.cumsum([lengths[i] for i in seq])
    total = int(end[-1])

    def fields(T):
        cuts = np.searchsorted(end, np.arange(0, total, T), side="right")
        last = np.searchsorted(end, np.minimum(np.arange(T, total + T, T), total) - 1, side="right")
        return np.maximum(np.maximum.reduceat(w, cuts), w[last])

    lo = max(max(un[1] for un in units), -(-int((w * np.diff(end, prepend=0)).sum()) // B))
    hi = lo if fields(lo).sum() <= B else total
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fields(mid).sum() <= B else (mid + 1, hi)
    return lo, fields(lo).tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 13), st.integers(1, 300), st.integers(0, 4), st.booleans()),
                min_size=1, max_size=40))
def test_band_slots_match_the_numpy_search(reqs):
    """_band_slots' pure-Python search finds the rows and fields of the numpy one."""
    from fpscope.reveal.packing import _band_slots

    widths, lengths, families, exclusive = (list(c) for c in zip(*reqs))
    serial = {f for f, e in zip(families, exclusive) if e}
    idx = list(range(len(reqs)))
    T, slots = _band_slots(idx, widths, lengths, families, serial, 24)
    assert (T, [sl[0] for sl in slots]) == _band_slots_reference(idx, widths, lengths, families,
                                                                 serial, 24)


class _BlockedScan:
    """A running sum whose last output alone adds two half totals ((x0+..+x31) + (x32+..+x63)):
    outputs 33..62 are chains from x0, not the last output's tree restricted to x0..xj (that
    would be (x0+..+x31) + (x32+..+xj); output 32 is the same either way)."""

    @staticmethod
    def _scan(x):
        out = np.cumsum(x)
        h = len(x) // 2
        out[-1] = np.cumsum(x[:h])[-1] + np.cumsum(x[h:])[-1]
        return out


def test_scan_outputs_are_checked_against_the_prefix_of_the_tree(capsys):
    """numpy.cumsum: every output j equals the last output's chain restricted to x0..xj (pairs
    answered by all outputs of one call); a blocked scan is caught and named."""
    from fpscope.cli import main
    from fpscope.targets.numpy_targets import NumpyCumsum

    t = make_target("numpy.cumsum", n=64)
    try:
        res = reveal(t, replay_samples=4)
    finally:
        t.close()
    said = res.stats.checks["scan_prefixes"]
    assert isinstance(said, int) and said > 64

    class Blocked(_BlockedScan, NumpyCumsum):
        pass

    t = make_target("numpy.cumsum", n=64)
    t.__class__ = Blocked
    try:
        res = reveal(t, replay_samples=4)
    finally:
        t.close()
    said = res.stats.checks["scan_prefixes"]
    assert isinstance(said, str) and said.startswith("no: outputs 33, 34"), said
    assert main(["reveal", "numpy.cumsum", "--n", "40"]) == 0
    assert "every output is the tree's prefix" in " ".join(capsys.readouterr().out.split())
