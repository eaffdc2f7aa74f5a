"""Fleets: comparing the matrix records of many machines (``fpscope fleet``).

A *fleet* is a set of workers (machines, containers, CI runners), each of which ran the matrix
suite (:mod:`fpscope.matrix`) into a folder of its own. This package owns everything past the
single machine: :mod:`fpscope.fleet.compare` reads those folders however they were gathered (a
Dask run, scp, CI artefacts), lines up their cells by target and conditions, splits the workers
of each cell into groups that agree bit for bit (tree, node arithmetic, output classes: the
"identical" of :mod:`fpscope.diff`) and writes ``fleet.json``; :mod:`fpscope.fleet.report`
renders ``fleet.html``; :mod:`fpscope.fleet.run` (``fpscope matrix --dask``) runs the suite on
every worker of a Dask cluster.
"""

from .compare import (
    FleetError,
    cell_label,
    compare_folders,
    fleet_text,
    load_worker,
    worker_folders,
    write_fleet,
)

__all__ = ["FleetError", "cell_label", "compare_folders", "fleet_text", "load_worker",
           "worker_folders", "write_fleet"]
