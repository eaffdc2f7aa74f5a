"""FPRev's leaf sets and the tree built from what their pivots found.

Both FPRev loops (plain, :func:`fpscope.reveal.fprev`; packed,
:class:`fpscope.reveal.staged.Staged`) keep one :class:`Task` a leaf set: its pivot and the
groups of leaves at each l value from it. A group of one leaf is done; a larger one is a new set
of the next stage (:func:`add_groups`). :func:`combine` then assembles the canonical
nested-tuple tree from the groups, bottom-up, and checks that the node sizes add up.
"""

from __future__ import annotations

import numpy as np

from .prober import RevealError


class Task:
    """A leaf set of FPRev and what its pivot found: ``groups`` of (l, child), child a task id
    or -1 - leaf.

    A *proven* set is a complete subtree, or several children of a multi-way node, which the
    weight-1 guard on ``guard`` (its parent's pivot) exposes. Otherwise it is an *interval*:
    the leaves x of its parent (task ``parent``, pivot ``guard``) with base < l(guard, x) <= top,
    both levels real ancestors of the guard, pivoted at one of its ``witnesses`` (leaves with
    l(guard, w) = top); once probed its members shrink to the pivot's complete subtree.
    """

    __slots__ = ("members", "pivot", "guard", "strategy", "proven", "parent", "base", "top",
                 "witnesses", "groups")

    def __init__(self, members, guard=-1, strategy=0, proven=True, parent=-1, base=0, top=0,
                 witnesses=None):
        self.members = members
        self.pivot = -1
        self.guard = guard
        self.strategy = strategy
        self.proven = proven
        self.parent = parent
        self.base = base
        self.top = top
        self.witnesses = witnesses
        self.groups: list = []


def pick_pivot(t: Task, rng) -> None:
    """The pivot by the set's strategy: lowest leaf, then highest, then random, as one giant group
    after another shows a chain (intervals choose among their witnesses the same way)."""
    if t.strategy == 2:
        t.pivot = int(rng.choice(t.members if t.witnesses is None else t.witnesses))
    elif t.witnesses is None:  # members are sorted
        t.pivot = int(t.members[-t.strategy])
    else:
        t.pivot = int(t.witnesses.max() if t.strategy else t.witnesses.min())


def add_groups(tasks: list, owner: np.ndarray, leaves: np.ndarray, levels: np.ndarray) -> list:
    """Group each leaf by its exact l value from the pivot of its task ``owner``: a single leaf
    joins the task's groups at once, a larger group becomes a new (proven) task guarded by the
    pivot; a group of more than half the set (a chain) advances the pivot strategy. Returns
    the new tasks."""
    if not len(leaves):
        return []
    order = np.lexsort((leaves, levels, owner))
    own, lev, leaf = owner[order], levels[order], leaves[order]
    cuts = np.flatnonzero((own[1:] != own[:-1]) | (lev[1:] != lev[:-1])) + 1
    firsts = np.concatenate([[0], cuts])
    new = []
    for a, b, tid, L, x in zip(firsts.tolist(), [*cuts.tolist(), len(leaf)], own[firsts].tolist(),
                               lev[firsts].tolist(), leaf[firsts].tolist()):
        t = tasks[tid]
        if b - a == 1:  # a single leaf: nothing left to probe
            t.groups.append((L, -1 - x))
            continue
        new.append(len(tasks))
        t.groups.append((L, len(tasks)))
        tasks.append(Task(leaf[a:b], guard=t.pivot,
                           strategy=min(t.strategy + 1, 2) if 2 * (b - a) > len(t.members) else 0))
    return new



class _Partial:
    """A node under construction: children as (node, smallest leaf) pairs, declared size (from l
    values), leaves held."""

    __slots__ = ("children", "size", "count")

    def __init__(self, children, size, count):
        self.children = children
        self.size = size
        self.count = count


def combine(tasks: list, binary: bool):
    """The canonical nested-tuple tree from the tasks' groups, bottom-up (children were created
    after their parents). A node closes into a canonical tuple (children sorted by smallest
    leaf) as soon as it holds all its leaves; ``binary``: every node must close at once with
    two children (packed probes), else multi-way nodes are assembled as the l values say.

    Raises:
        RevealError("inconsistent"): the group sizes do not add up.
    """
    # result[tid] = (node, smallest leaf); an open multi-way node is a _Partial whose children
    # list holds (node, smallest leaf) pairs
    result: dict[int, tuple] = {}
    for tid in range(len(tasks) - 1, -1, -1):
        t = tasks[tid]
        mem = t.members
        if len(mem) == 1:
            result[tid] = (int(mem[0]), int(mem[0]))
            continue
        running: object = t.pivot
        rk = running  # smallest leaf under running
        count = 1
        for L, child in (sorted(t.groups) if binary else t.groups):
            if child < 0:  # a single leaf, encoded as -1 - leaf
                sub = sk = -1 - child
                g = 1
            else:
                sub, sk = result.pop(child)
                g = len(tasks[child].members)
            if L <= count or running.__class__ is _Partial:
                raise RevealError("inconsistent", _incons(t.pivot, L, count))
            if sub.__class__ is _Partial:  # an open multi-way node: running joins it
                if sub.size != L or count + g > L:
                    raise RevealError("inconsistent", _incons(t.pivot, L, count + g))
                kids = sub.children + [(running, rk)]
            elif count + g > L or (binary and count + g < L):
                raise RevealError("inconsistent", _incons(t.pivot, L, count + g))
            else:
                kids = None
            count += g
            if kids is None and count == L:  # most nodes: binary, closed at once
                running = (running, sub) if rk < sk else (sub, running)
            elif kids is None:
                running = _Partial([(running, rk), (sub, sk)], L, count)
            elif count == L:
                running = tuple(nd for nd, _ in sorted(kids, key=lambda c: c[1]))
            else:
                running = _Partial(kids, L, count)
            rk = rk if rk < sk else sk
        result[tid] = (running, rk)
    root = result[0][0]
    if isinstance(root, _Partial):
        raise RevealError(
            "inconsistent",
            f"the revealed node sizes do not add up (a node of {root.size} leaves holds "
            f"{root.count}): the probes are not those of a fixed summation tree",
        )
    return root


def _incons(p, L, count) -> str:
    return (
        f"probes from leaf {p} are inconsistent (a subtree of {count} leaves under a node of "
        f"{L}): the op is not a fixed tree of rounded additions, is nondeterministic, or the "
        f"mask does not absorb"
    )

