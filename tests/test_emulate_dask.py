"""fpscope.emulate.matmul(client=...) on a 2-worker Dask LocalCluster: the same bits as a local
run (NaN payloads and output dtype included), for instruction and library-level (split-K)
profiles, fp32 / fp16 / bf16 outputs, batched operands, bands that do not divide M; failed
bands raise instead of returning a partial D."""

import numpy as np
import pytest

pytest.importorskip("distributed")

from distributed import Client, LocalCluster  # noqa: E402

from fpscope.emulate import matmul  # noqa: E402
from fpscope.emulate.distributed import RETRIES, map_row_bands  # noqa: E402
from fpscope.profile import PRESETS  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as c:
        yield c


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(f"u{x.dtype.itemsize}")


def _assert_same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _operands(M, K, N, seed, dtype=np.float16, special=True):
    """Random values of ``dtype``; with ``special`` NaN, +-Inf, subnormals and -0 planted in
    A, B and C (C in float32)."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K)).astype(dtype)
    B = rng.standard_normal((K, N)).astype(dtype)
    C = rng.standard_normal((M, N)).astype(np.float32)
    if special:
        tiny = np.float16(2.0 ** -24) if dtype == np.float16 else dtype(2.0 ** -20)
        A[0, 0], A[1, 2], A[2, :] = np.nan, np.inf, tiny
        A[3, :] = -A[3, :] * 0  # -0 and +0
        B[4, 1], B[:, 5] = -np.inf, tiny
        C[5, 3], C[6, 0], C[7, 7] = -0.0, np.float32(1e-40), np.inf
        A[8, 0], B[0, 6] = np.inf, 0.0  # Inf * 0: NaN
    return A, B, C


CASES = [  # (profile, engine, extra matmul arguments)
    ("hopper-fp16", "numba", {}),
    (PRESETS["hopper-fp16"].replace(split_k=2, split_k_order="pairwise"), "numba", {}),
    ("hopper-fp16-fp16out", "numpy", {}),
    ("hopper-bf16", "numpy", {"out_format": "bf16", "alpha": 0.5}),
    (PRESETS["ada-fp16"].replace(split_k=2, split_k_format="bf16"), "numpy", {}),
]


@pytest.mark.parametrize("profile, engine, extra", CASES,
                         ids=["hopper-fp16", "split-k-pairwise", "fp16out", "bf16-epilogue",
                              "split-k-bf16-partials"])
@pytest.mark.parametrize("special", [False, True], ids=["random", "special"])
def test_cluster_bits_equal_local_bits(client, profile, engine, extra, special):
    name = profile if isinstance(profile, str) else profile.name
    A, B, C = _operands(37, 64, 24, seed=3, special=special)
    if name.startswith("hopper-bf16"):  # bf16 values held in float32: fp16 bits truncated
        A, B = ((x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
                for x in (A, B))
    if "fp16out" in name:
        C = C.astype(np.float16)
    want = matmul(A, B, C, profile=profile, engine=engine, **extra)
    got = matmul(A, B, C, profile=profile, engine=engine, client=client, bands=5, **extra)
    _assert_same_bits(got, want)
    if special:
        assert np.isnan(want.astype(np.float64)).any()  # the NaN patterns were compared


def test_float64_results_and_default_bands(client):
    A, B, C = _operands(19, 32, 8, seed=4)
    want = matmul(A, B, C, profile="hopper-fp16", engine="numpy", dtype="float64")
    got = matmul(A, B, C, profile="hopper-fp16", engine="numpy", dtype="float64", client=client)
    _assert_same_bits(got, want)


@pytest.mark.parametrize("a_shape, b_shape", [((3, 10, 32), (32, 8)), ((2, 5, 32), (2, 32, 8)),
                                              ((32,), (32, 6))])
def test_batched_and_vector_operands(client, a_shape, b_shape):
    rng = np.random.default_rng(5)
    A = rng.standard_normal(a_shape).astype(np.float16)
    B = rng.standard_normal(b_shape).astype(np.float16)
    want = matmul(A, B, profile="ampere-fp16", engine="numpy")
    got = matmul(A, B, profile="ampere-fp16", engine="numpy", client=client, bands=3)
    _assert_same_bits(got, want)


def test_progress_counts_every_row_once(client):
    A, B, C = _operands(23, 32, 8, seed=6, special=False)
    calls = []
    matmul(A, B, C, profile="hopper-fp16", engine="numpy", client=client, bands=7,
           progress=lambda done, total: calls.append((done, total)))
    assert len(calls) == 7
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert calls[-1] == (23, 23) and {t for _, t in calls} == {23}


def test_more_bands_than_rows(client):
    A, B, C = _operands(3, 32, 4, seed=7, special=False)
    want = matmul(A, B, C, profile="hopper-fp16", engine="numpy")
    _assert_same_bits(matmul(A, B, C, profile="hopper-fp16", engine="numpy", client=client,
                             bands=50), want)


@pytest.mark.parametrize("bands", [0, -2, 2.5, True])
def test_bad_band_counts_are_refused(client, bands):
    A, B, _ = _operands(4, 32, 4, seed=8, special=False)
    with pytest.raises(ValueError, match="bands must be a positive integer"):
        matmul(A, B, profile="hopper-fp16", engine="numpy", client=client, bands=bands)


def test_a_client_that_is_not_a_dask_client_is_refused():
    A, B, _ = _operands(4, 32, 4, seed=8, special=False)
    with pytest.raises(ValueError, match="client must be a .*Client, not str"):
        matmul(A, B, profile="hopper-fp16", engine="numpy", client="tcp://127.0.0.1:8786")


def test_operand_errors_are_raised_here_not_on_the_cluster(client):
    A, B, _ = _operands(4, 30, 4, seed=9, special=False)
    with pytest.raises(ValueError, match="not a multiple of"):
        matmul(A, B, profile="hopper-fp16", engine="numpy", client=client)


def test_a_band_that_keeps_failing_raises_and_returns_nothing(client):
    def boom(a, b):
        if a[0, 0] == 4:  # the band of rows 4..5 fails on every try
            raise OSError("disk on fire")
        return a @ b

    A = np.arange(8.0)[:, None] * np.ones((8, 2))
    with pytest.raises(RuntimeError, match=rf"rows 4..5 of D failed .* {RETRIES} retries: "
                                           r"OSError: disk on fire"):
        map_row_bands(client, boom, (A,), (np.ones((2, 3)),), bands=4)


def test_a_band_that_fails_once_is_retried(client, tmp_path):
    marks = str(tmp_path)

    def flaky(a, b):
        import os

        mark = os.path.join(marks, f"band-{int(a[0, 0])}")
        if not os.path.exists(mark):  # the first try of every band fails
            open(mark, "w").close()
            raise OSError("worker hiccup")
        return a @ b

    A = np.arange(8.0)[:, None] * np.ones((8, 2))
    B = np.ones((2, 3))
    np.testing.assert_array_equal(map_row_bands(client, flaky, (A,), (B,), bands=4), A @ B)
    assert len(list(tmp_path.iterdir())) == 4


def test_a_worker_that_dies_loses_its_bands_which_are_sent_again(client, tmp_path):
    """Band 0's first try kills its worker process (the nanny restarts it): the bands scattered
    to that worker are gone; they are scattered again and D is complete and right."""
    mark = str(tmp_path / "died")

    def fatal_once(a, b):
        import os

        if a[0, 0] == 0 and not os.path.exists(mark):
            open(mark, "w").close()
            os._exit(1)
        return a @ b

    A = np.arange(16.0)[:, None] * np.ones((16, 2))
    B = np.ones((2, 3))
    np.testing.assert_array_equal(map_row_bands(client, fatal_once, (A,), (B,), bands=8), A @ B)
    assert (tmp_path / "died").exists()
    client.wait_for_workers(2, timeout=60)  # the nanny's new worker, for the tests after


def test_cli_dask_address_gives_the_local_bits(client, tmp_path, capsys):
    from fpscope.cli import main

    A, B, C = _operands(21, 32, 8, seed=10)
    for name, x in (("A", A), ("B", B), ("C", C)):
        np.save(tmp_path / f"{name}.npy", x)
    common = ["emulate", "--profile", "hopper-fp16", "--engine", "numpy", "--a",
              str(tmp_path / "A.npy"), "--b", str(tmp_path / "B.npy"), "--c",
              str(tmp_path / "C.npy"), "--quiet"]
    assert main(common + ["-o", str(tmp_path / "D.npy"), "--dask", client.scheduler.address,
                          "--bands", "4"]) == 0
    want = matmul(A, B, C, profile="hopper-fp16", engine="numpy")
    _assert_same_bits(np.load(tmp_path / "D.npy"), want)
    assert main(common + ["-o", str(tmp_path / "E.npy"), "--bands", "4"]) == 2
    assert "--bands needs --dask" in capsys.readouterr().err


@pytest.mark.parametrize("bands", [None, ["--bands", "2"]])
def test_cli_a_cluster_without_workers_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch,
                                                              bands):
    import fpscope.emulate.distributed as distributed
    from fpscope.cli import main

    monkeypatch.setattr(distributed, "WAIT_FOR_WORKERS_S", 1)
    A, B, _ = _operands(12, 16, 8, seed=11)
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", B)
    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster:
        rc = main(["emulate", "--profile", "hopper-fp16", "--engine", "numpy", "--a",
                   str(tmp_path / "A.npy"), "--b", str(tmp_path / "B.npy"), "--quiet",
                   "-o", str(tmp_path / "D.npy"), "--dask", cluster.scheduler_address]
                  + (bands or []))
    err = capsys.readouterr().err
    assert rc == 2
    assert "no workers (none joined within 1 s)" in err
    assert "bands=" not in err and "Traceback" not in err
    assert not (tmp_path / "D.npy").exists()
