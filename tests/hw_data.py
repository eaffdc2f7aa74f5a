"""Where the tests find the recorded hardware vectors (hw-vectors layout): the
FPSCOPE_HW_VECTORS environment variable first, then ../shared/data/hw-vectors beside the
repository (the project workspace's copy; a clone does not have it). Tests that need them are
skipped with :data:`SKIP_REASON` where neither is a folder. The data are the public
Khattak-Mikaitis recordings of single tensor-core operations on V100, A100, Ada and H100
(github.com/north-numerical-computing/MATLAB-tensor-core, folder model_validation; arXiv
2512.07004)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV = "FPSCOPE_HW_VECTORS"
_WORKSPACE = Path(__file__).resolve().parents[2] / "shared" / "data" / "hw-vectors"


def hw_root() -> Path:
    """$FPSCOPE_HW_VECTORS when set, else the workspace copy."""
    return Path(os.environ[ENV]) if os.environ.get(ENV) else _WORKSPACE


HW_ROOT = hw_root()
SKIP_REASON = (f"recorded hardware vectors not found at {HW_ROOT}: set {ENV} to a copy of the "
               f"Khattak-Mikaitis recordings (github.com/north-numerical-computing/"
               f"MATLAB-tensor-core, folder model_validation; README 'Recorded hardware "
               f"vectors')")
needs_hw = pytest.mark.skipif(not HW_ROOT.is_dir(), reason=SKIP_REASON)
