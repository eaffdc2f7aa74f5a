"""fpscope.emulate.matmul's typed results (the output format's dtype, NaN as the profile's
nan_bits) against the recorded tensor-core words of real GPUs, bit for bit, NaN outputs
included (shared/data/hw-vectors; skipped where absent).

Each recorded sample has its own a, b and c: blocks of 50 samples run as one GEMM
(A = their a rows, B = their b columns, C with their c on the diagonal) and the diagonal is
compared with the recorded words. The recordings hold no NaN output (no sample has a NaN or
Inf input), so the NaN patterns (nan_bits) are checked against mmasim's models instead
(tests/test_mmasim_oracle.py, scripts/mmasim_validation.py)."""

import numpy as np
import pytest

from fpscope import emulate
from fpscope.emulate import HW_SETS, hw_c_values, load_hw_set
from fpscope.formats import get_format
from fpscope.profile import PRESETS

from hw_data import HW_ROOT, SKIP_REASON

pytestmark = pytest.mark.skipif(not HW_ROOT.is_dir(), reason=SKIP_REASON)

BLOCK = 50
SAMPLES = 1000


def _uint(dtype):
    return np.dtype(f"uint{np.dtype(dtype).itemsize * 8}")


@pytest.mark.parametrize("key", list(HW_SETS), ids=lambda k: "-".join(k))
def test_typed_matmul_gives_the_recorded_words(key):
    gpu, folder, out = key
    p = PRESETS[HW_SETS[key]]
    a, b, c, d = load_hw_set(HW_ROOT, gpu, folder, out)
    cv = hw_c_values(gpu, folder, out, c)
    nan_rows = np.flatnonzero(np.isnan(cv) | np.isnan(a).any(axis=1) | np.isnan(b).any(axis=1))
    rows = np.unique(np.concatenate([np.arange(min(SAMPLES, len(a))), nan_rows]))
    pad = p.k - a.shape[1]
    if pad > 0:
        a = np.pad(a, ((0, 0), (0, pad)))
        b = np.pad(b, ((0, 0), (0, pad)))
    got_words, want_words = [], []
    for s in range(0, len(rows), BLOCK):
        r = rows[s : s + BLOCK]
        C = np.zeros((len(r), len(r)))
        np.fill_diagonal(C, cv[r])
        D = emulate.matmul(a[r], b[r].T, C, profile=p, engine="numpy")
        assert D.dtype == np.dtype(get_format(p.out_format).numpy_dtype())
        got_words.append(np.diagonal(D).view(_uint(D.dtype)))
        want_words.append(d[r])
    got, want = np.concatenate(got_words), np.concatenate(want_words).astype(got_words[0].dtype)
    bad = np.flatnonzero(got != want)
    assert not len(bad), (f"{p.name}: {len(bad)} of {len(rows)} words differ, first sample "
                          f"{rows[bad[0]]}: 0x{int(got[bad[0]]):X} vs 0x{int(want[bad[0]]):X}")

