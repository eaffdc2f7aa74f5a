"""Where the scripts find the recorded hardware vectors (the hw-vectors layout, see README
"Recorded hardware vectors"): the folder given on the command line, else the
FPSCOPE_HW_VECTORS environment variable, else ../shared/data/hw-vectors beside the repository
(where the project's own workspace keeps them; a clone does not have it)."""

from __future__ import annotations

import os
from pathlib import Path

ENV = "FPSCOPE_HW_VECTORS"
SOURCE = ("the public Khattak-Mikaitis recordings: github.com/north-numerical-computing/"
          "MATLAB-tensor-core, folder model_validation (arXiv 2512.07004)")


def hw_root(arg: str | None = None) -> Path:
    """The hw-vectors folder: ``arg``, else $FPSCOPE_HW_VECTORS, else the workspace copy."""
    if arg:
        return Path(arg)
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    return Path(__file__).resolve().parents[2] / "shared" / "data" / "hw-vectors"


def missing(root: Path) -> str:
    """One line for a folder that is not there."""
    return (f"no hardware vectors at {root}: pass the folder or set {ENV} to a copy of "
            f"{SOURCE}")
