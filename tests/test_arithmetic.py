"""Issue 23: the whole node arithmetic (node formats, product entry: rounded / fused) is
revealed, recorded, replayed and compared; gates check live bits."""

import json

import numpy as np
import pytest

from fpscope.arithmetic import Arithmetic
from fpscope.diff import Side, diff_trees
from fpscope.formats import FP32, FP64
from fpscope.replay import replay_arithmetic
from fpscope.reveal import reveal
from fpscope.targets.base import Target
from fpscope.tree import SumTree


class ArithTarget(Target):
    """A dot product whose tree and node arithmetic are given: the obviously right evaluation
    (replay_arithmetic, checked against exact fractions in test_replay.py)."""

    name = "synthetic.dot"
    has_products = True

    def __init__(self, tree, arith, fmt=FP32):
        super().__init__(tree.n, fmt, arith.out_format)
        self.tree, self.arith = tree, arith

    def evaluate(self, X):
        X = np.asarray(X, dtype=np.float64)
        self.calls += len(X)
        return replay_arithmetic(self.tree, self.arith, A=X, B=np.ones_like(X))

    evaluate_each = evaluate

    def evaluate_products(self, A, B):
        self.calls += len(A)
        return replay_arithmetic(self.tree, self.arith, A=np.asarray(A, float), B=np.asarray(B, float))


def _lanes(n, lanes=8, tail=5):
    """Vector lanes of stride ``lanes`` combined pairwise, then a sequential tail: an sdot."""
    body = n - tail
    chains = []
    for r in range(lanes):
        idx = list(range(r, body, lanes))
        node = idx[0]
        for i in idx[1:]:
            node = [node, i]
        chains.append(node)
    while len(chains) > 1:
        chains = [[chains[k], chains[k + 1]] for k in range(0, len(chains), 2)]
    node = chains[0]
    for i in range(body, n):
        node = [node, i]
    return SumTree(node)


def _sdot_like(tree, fused_body=True):
    """fp32 lanes with FMA (first product of each lane rounded), an fp64 tail of products
    rounded to fp32 (OpenBLAS sdot's shape, NUMERICS.md section 4)."""
    nodes = list(tree.nodes_postorder())
    n = tree.n
    tail = set(range(n - 5, n))
    fmts, entries = [], [None] * n
    for nd in nodes:
        leaves = [c for c in nd if not isinstance(c, tuple)]
        in_tail = any(c in tail for c in leaves)
        fmts.append("fp64" if in_tail else "fp32")
        for c in leaves:
            if c in tail:
                entries[c] = "rounded:fp32"
            elif fused_body and not (len(leaves) == 2 and c == min(leaves)):
                entries[c] = "fused"
            else:
                entries[c] = "rounded"
    return Arithmetic(tuple(fmts), tuple(entries), "fp32")


@pytest.mark.parametrize("case", ["fma-chain", "rounded-chain", "sdot-like", "sdot-rounded",
                                  "fp64-fma"])
def test_reveal_finds_the_synthetic_arithmetic(case):
    n = 61
    if case in ("fma-chain", "rounded-chain", "fp64-fma"):
        tree = SumTree.sequential(n)
        fmt = "fp64" if case == "fp64-fma" else "fp32"
        entries = ["rounded"] + ["fused" if case != "rounded-chain" else "rounded"] * (n - 1)
        arith = Arithmetic(tuple([fmt] * (n - 1)), tuple(entries), fmt)
        target = ArithTarget(tree, arith, FP64 if fmt == "fp64" else FP32)
    else:
        tree = _lanes(n)
        arith = _sdot_like(tree, fused_body=case == "sdot-like")
        target = ArithTarget(tree, arith)
    res = reveal(target)
    assert res.tree == tree
    assert res.arithmetic == arith, (res.arithmetic.describe(), arith.describe())
    assert res.replay["bit_exact"] and res.replay["products"]


def test_words_say_fused_and_rounded():
    tree = _lanes(61)
    text = _sdot_like(tree).describe()
    assert "fused (FMA)" in text and "rounded to fp32, then added at x56..x60" in text
    assert "fp32 (55 nodes), fp64 (5 nodes)" in text


def test_diff_names_the_product_entry_and_checks_a_witness():
    tree = _lanes(61)
    a = Side("a", tree=tree, arith=_sdot_like(tree, fused_body=False))
    b = Side("b", tree=tree, arith=_sdot_like(tree, fused_body=True))
    d = diff_trees(a, b)
    assert not d.same and d.verdict == "same tree, different node arithmetic"
    assert d.parameter["name"].startswith("product entry of leaf")
    assert (d.parameter["a"], d.parameter["b"]) == ("rounded", "fused")
    w = d.witness
    assert w is not None and w["a"] != w["b"]
    # the witness is checked: replaying its inputs gives the two outputs it names
    def words(hexes):  # fp32 bit patterns
        return np.array([int(h, 16) for h in hexes], dtype=np.uint32).view(np.float32)[None, :]

    A, B = words(w["input"]["a"]).astype(np.float64), words(w["input"]["b"]).astype(np.float64)
    ya = replay_arithmetic(tree, a.arith, A=A, B=B)[0]
    yb = replay_arithmetic(tree, b.arith, A=A, B=B)[0]
    assert ya != yb and w["a"].endswith(f"({float(ya)!r})") and w["b"].endswith(f"({float(yb)!r})")
    same = diff_trees(a, Side("c", tree=tree, arith=_sdot_like(tree, fused_body=False)))
    assert same.same and same.verdict == "identical"


def test_arithmetic_json_round_trip_and_errors():
    tree = _lanes(61)
    arith = _sdot_like(tree)
    obj = json.loads(json.dumps(arith.to_json()))
    assert Arithmetic.from_json(obj) == arith
    with pytest.raises(ValueError):
        Arithmetic.from_json({**obj, "products": [["sideways", 61]]})
    with pytest.raises(ValueError):
        Arithmetic.from_json({**obj, "node_formats": [["fp32", 0]]})


# -- gates against callables: live bits decide -----------------------------------------------

_MODULE = '''
import numpy as np

def s32(x):
    s = np.float32(0)
    for v in x:
        s = np.float32(s + v)
    return s

def narrow16(x):
    """The same order with every partial sum rounded to fp16: a narrowed accumulator."""
    s = np.float32(0)
    for v in x:
        s = np.float32(np.float16(np.float32(s + v)))
    return s

def tweak(x):
    """s32 plus one ulp when x[0] lies strictly between 0.25 and 0.5: a data-dependent change
    that no probe value (0, units, +-M, powers of two) triggers."""
    s = s32(x)
    if 0.25 < x[0] < 0.5:
        s = np.nextafter(s, np.float32(np.inf))
    return s

def s32_reversed(x):
    return s32(x[::-1])
'''


@pytest.fixture
def kernels(tmp_path):
    path = tmp_path / "kernels.py"
    path.write_text(_MODULE)
    return str(path)


@pytest.fixture
def base(kernels, tmp_path):
    from fpscope.cli import main

    out = tmp_path / "base.json"
    assert main(["reveal", f"{kernels}:s32", "--n", "48", "--record", str(out), "--quiet"]) == 0
    return str(out)


def test_unmodelled_difference_fails_the_bitwise_gate(base, kernels):
    from fpscope.gate import gate

    res = gate(base, target=f"{kernels}:tweak", samples=32)
    assert res.diff.same  # tree and arithmetic look the same to every probe
    assert not res.passed and res.reason.startswith("unmodelled difference")
    assert res.bits["matched"] < res.bits["samples"] and res.bits["first_mismatch"]
    same = gate(base, target=f"{kernels}:s32", samples=32)
    assert same.passed and same.bits["bit_exact"]


def test_tolerant_gate_units(base, kernels):
    from fpscope.gate import gate

    # reversing a 48-term sequential sum moves results by about 5 units of u * sum|terms|
    reordered = gate(base, target=f"{kernels}:s32_reversed", policy="tolerant", units=16,
                     samples=32)
    assert not reordered.diff.same and reordered.passed
    assert 0 < reordered.bits["max_units"] <= 16
    strict = gate(base, target=f"{kernels}:s32_reversed", policy="bitwise", samples=32)
    assert not strict.passed
    narrowed = gate(base, target=f"{kernels}:narrow16", policy="tolerant", units=16, samples=32)
    assert not narrowed.passed and narrowed.bits["max_units"] > 100


def test_sweep_reports_an_arithmetic_change(capsys):
    """numpy.matmul with one row accumulates in fp64 (through its 1-row path), two rows in
    fp32 on this machine's numpy; the sweep must say so (it used to say 'does not change')."""
    from fpscope.cli import main

    rc = main(["reveal", "numpy.matmul", "--shape", "1x3x1", "--sweep", "rows=1,2",
               "--format", "json"])
    rec = json.loads(capsys.readouterr().out)
    assert rc == 0
    rows = rec["sweep"]["rows"]
    arith = rec["sweep"]["arithmetics"]
    a1, a2 = (arith[r["arithmetic_id"]] for r in rows)
    if a1 == a2:
        pytest.skip("this numpy's matmul uses one arithmetic for 1 and 2 rows")
    assert rec["sweep"]["changes"] == [[1, 2]]
    assert rec["sweep"]["change_details"][0]["arithmetic"] is not None


# -- real OpenBLAS kernels, chosen by OPENBLAS_CORETYPE in a child process ------------------------

def _openblas_coretypes():
    """Skip unless numpy's BLAS is OpenBLAS and both Haswell (FMA) and Sandybridge kernels run."""
    from threadpoolctl import threadpool_info

    from fpscope.targets import make_target
    from fpscope.targets.base import TargetError

    if not any(i.get("internal_api") == "openblas" for i in threadpool_info()):
        pytest.skip("numpy's BLAS is not OpenBLAS")
    for core in ("Haswell", "Sandybridge"):
        try:
            with make_target("numpy.dot", n=8, env={"OPENBLAS_CORETYPE": core}) as t:
                t.evaluate_products(np.ones((1, 8)), np.ones((1, 8)))
        except TargetError as exc:
            pytest.skip(f"OpenBLAS {core} kernels do not run here: {exc}")


@pytest.mark.slow
@pytest.mark.parametrize("name,shape", [("numpy.dot", None), ("numpy.matvec", "1x1000")])
def test_openblas_coretypes_fma_records_verify_diff_and_gate(name, shape, tmp_path, capsys):
    """Haswell's sdot fuses products (FMA), Sandybridge's rounds them (NUMERICS.md section 4):
    the records say so and differ, each verifies against its own live op, the bitwise gate
    fails across them and passes on the same kernel, the tolerant gate at 4 units passes."""
    from fpscope.cli import main
    from fpscope.gate import gate

    _openblas_coretypes()
    size = ["--shape", shape] if shape else ["--n", "1000"]
    recs = {}
    for core in ("Haswell", "Sandybridge"):
        path = tmp_path / f"{core}.json"
        assert main(["reveal", name, *size, "--env", f"OPENBLAS_CORETYPE={core}", "--record",
                     str(path), "--quiet", "--samples", "16"]) == 0
        recs[core] = str(path)
        assert main(["verify", str(path), "--samples", "32"]) == 0  # its own kernel (env kept)
    capsys.readouterr()
    h, s = (json.load(open(recs[c]))["arithmetic"] for c in ("Haswell", "Sandybridge"))
    assert "fused (FMA)" in h["described"] and "fused" not in s["described"]
    assert main(["diff", recs["Sandybridge"], recs["Haswell"]]) == 1
    out = capsys.readouterr().out
    assert out.startswith("same tree, different node arithmetic")
    assert "product entry of leaf" in out and "witness" in out
    across = gate(recs["Sandybridge"], env={"OPENBLAS_CORETYPE": "Haswell"}, samples=32)
    assert not across.passed and across.bits["matched"] < across.bits["samples"]
    assert gate(recs["Sandybridge"], samples=32).passed
    tolerant = gate(recs["Sandybridge"], env={"OPENBLAS_CORETYPE": "Haswell"}, samples=32,
                    policy="tolerant", units=4)
    assert tolerant.passed and 0 < tolerant.bits["max_units"] <= 4
    # the old false verdicts: verify of the Sandybridge record against the Haswell kernel
    assert main(["verify", recs["Sandybridge"], "--env", "OPENBLAS_CORETYPE=Haswell",
                 "--samples", "32"]) == 1


@pytest.mark.parametrize("argv", [
    ["reveal", "numpy.sum", "--n", "8", "--env", "NOEQUALS"],
    ["reveal", "numpy.sum", "--n", "8", "--env", "=x"],
    ["reveal", "numpy.sum", "--n", "8", "--env", "BAD-NAME=1"],
    ["reveal", "numpy.sum", "--n", "8", "--sweep", "env:=a,b"],
    ["reveal", "numpy.sum", "--n", "8", "--sweep", "env:1X=a,b"],
])
def test_bad_env_is_a_one_line_usage_error(argv, capsys):
    from fpscope.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ("--env" in err or "--sweep" in err)


def test_env_reaches_the_op_and_the_record(kernels, tmp_path, capsys):
    """--env runs the op in a child process; the record keeps the env and verify reuses it."""
    from fpscope.cli import main

    path = tmp_path / "envsum.py"
    path.write_text("import os\nimport numpy as np\n\n"
                    "def f(x):\n"
                    "    s = np.float32(0)\n"
                    "    for v in (x[::-1] if os.environ.get('FPSCOPE_REVERSE') else x):\n"
                    "        s = np.float32(s + v)\n"
                    "    return s\n")
    rec = tmp_path / "r.json"
    assert main(["reveal", f"{path}:f", "--n", "16", "--env", "FPSCOPE_REVERSE=1",
                 "--record", str(rec), "--quiet"]) == 0
    capsys.readouterr()
    data = json.load(open(rec))
    assert data["target"]["env"] == {"FPSCOPE_REVERSE": "1"}
    assert SumTree.from_json(data["tree"]) == SumTree.reverse_sequential(16)
    assert main(["verify", str(rec)]) == 0  # under the record's env
    assert main(["verify", str(rec), "--env", "FPSCOPE_REVERSE="]) == 1  # forward order


def _detect_node_formats_reference(target, tree, evaluate=None, nodes=None):
    """detect_node_formats as first written: one row at a time, each node's first leaves from
    tree.leaves (the obviously right construction of the probe rows)."""
    from fpscope.formats import get_format
    from fpscope.probes.accumulator import _CANDIDATES

    wanted = None if nodes is None else set(int(k) for k in nodes)
    nodes = list(tree.nodes_postorder())
    fin = target.in_format
    cands = [c for c in _CANDIDATES if get_format(c).p <= fin.p - fin.emin - 1]
    parent = {}
    for nd in nodes:
        for c in nd:
            if isinstance(c, tuple):
                parent[id(c)] = nd
    rows, owners = [], []
    for idx, nd in enumerate(nodes):
        par = parent.get(id(nd))
        if par is None or (wanted is not None and idx not in wanted):
            continue
        i, j = tree.leaves(nd[0])[0], tree.leaves(nd[1])[0]
        k = tree.leaves(par[0] if par[1] is nd else par[1])[0]
        for c in cands:
            t = get_format(c).p
            x = np.zeros(target.n, dtype=fin.numpy_dtype())
            x[i], x[j], x[k] = 1.0, np.ldexp(1.0, -t), -1.0
            rows.append(x)
            owners.append((idx, t))
    result = [None] * len(nodes)
    if not rows:
        return result, None
    X = np.asarray(rows)
    out = np.asarray((evaluate or target.evaluate)(X), dtype=np.float64)
    survived = {}
    for (idx, t), y in zip(owners, out):
        survived[idx] = survived.get(idx, 0) + (1 if y == np.ldexp(1.0, -t) else 0)
    for idx, count in survived.items():
        result[idx] = cands[count] if count < len(cands) else (">" + cands[-1])
    return result, X


@pytest.mark.parametrize("seed", range(4))
def test_node_format_rows_match_the_row_by_row_construction(seed):
    """detect_node_formats builds its probe rows in one array: the same rows (bit for bit, in
    the same order) and the same answers as one row at a time."""
    from families import random_tree
    from fpscope.formats import BF16, FP16
    from fpscope.probes.accumulator import detect_node_formats
    from fpscope.targets.simulated import SimulatedSum

    rng = np.random.default_rng(seed)
    tree = random_tree(int(rng.integers(3, 120)), rng)
    for acc, fin in ((FP32, FP32), (FP64, FP32), (FP32, FP16), (FP32, BF16)):
        target = SimulatedSum(tree, acc=acc, in_format=fin, out_format=acc)
        nodes = None if seed % 2 else rng.choice(tree.n - 1, size=(tree.n - 1) // 2, replace=False)
        seen = []

        def evaluate(X):
            seen.append(np.array(X, copy=True))
            return target.evaluate(X)

        got = detect_node_formats(target, tree, evaluate=evaluate, nodes=nodes)
        want, X = _detect_node_formats_reference(target, tree, nodes=nodes)
        assert got == want
        assert X is None and not seen or (seen[0].dtype == X.dtype and np.array_equal(seen[0], X))


def test_fill_nodes_takes_the_nearest_probed_node():
    """The vectorised fill equals the obvious rule: each unprobed non-root node takes the
    format of the nearest probed node in post-order, the lower index on a tie."""
    from fpscope.reveal.arithmetic import _fill_nodes

    rng = np.random.default_rng(5)
    for _ in range(200):
        m = int(rng.integers(2, 60))
        probed = sorted(rng.choice(m - 1, size=int(rng.integers(1, m)), replace=False).tolist())
        names = [None] * m
        for k in probed:
            names[k] = str(rng.choice(["bf16", "fp16", "fp32", "fp64"]))
        want = list(names)
        for k in range(m - 1):
            if want[k] is None:
                best = min(probed, key=lambda j: (abs(j - k), j))
                want[k] = names[best]
        assert _fill_nodes(names, probed) == want
