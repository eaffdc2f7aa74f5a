"""Records hold trees of any depth: a sequential tree of n leaves is n - 1 levels deep, past
Python's recursion limit for json (found by fpscope matrix on numpy.matmul 2x1000x16)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpscope.cli import main
from fpscope.record import (
    SCHEMA,
    RecordError,
    _deep_loads,
    json_loads,
    json_text,
    load_record,
    new_record,
    validate_record,
    write_record,
)
from fpscope.tree import SumTree


def test_deep_tree_round_trips_through_a_record(tmp_path):
    tree = SumTree.sequential(5000)
    rec = new_record("reveal", target={"name": "x", "n": 5000}, tree=tree.to_json(),
                     probe={"calls": 1}, summary="a chain")
    path = write_record(rec, tmp_path / "deep.json")
    back = load_record(path)
    assert SumTree.from_json(back["tree"]) == tree
    assert back["probe"] == {"calls": 1} and back["summary"] == "a chain"


def test_deep_tree_record_reads_with_plain_json_load(tmp_path):
    """Schema /2 stores the tree flat: the standard library's json.load reads a record of a
    5000-leaf sequential tree (4999 levels deep), which the nested /1 form made impossible."""
    assert SCHEMA == "fpscope.record/2"
    tree = SumTree.sequential(5000)
    rec = new_record("reveal", target={"name": "x", "n": 5000}, tree=tree.to_json(),
                     probe={"calls": 1}, summary="a chain")
    path = write_record(rec, tmp_path / "deep.json")
    with open(path, encoding="utf-8") as fh:
        back = json.load(fh)
    assert back["schema"] == "fpscope.record/2"
    assert back["tree"] == {"leaves": 5000, "nodes": [[0, 1]] + [[5000 + i, i + 2]
                                                                 for i in range(4998)]}
    assert SumTree.from_flat(back["tree"]) == tree
    assert SumTree.from_json(load_record(path)["tree"]) == tree
    # the tree is one line of the file, the rest indented
    lines = path.read_text().splitlines()
    assert sum('"nodes"' in line for line in lines) == 1 and len(lines) < 20


@pytest.mark.parametrize("tree", [SumTree.sequential(5000), SumTree.pairwise(64),
                                  SumTree(["C", [0, 1, 2, 3], [4, 5, 6, 7]]), SumTree(0)])
def test_schema_1_record_with_a_nested_tree_still_loads(tmp_path, tree):
    rec = new_record("reveal", target={"name": "x", "n": tree.n}, tree=tree.to_json(),
                     probe={"calls": 1}, summary="old")
    old = dict(rec, schema="fpscope.record/1", tree=tree.to_nested())
    path = write_record(old, tmp_path / "old.json")
    back = load_record(path)
    assert back["schema"] == "fpscope.record/1"
    assert isinstance(back["tree"], (list, int))  # nested, as written
    got = SumTree.from_json(back["tree"])
    assert got == tree and got.has_c == tree.has_c


def test_unknown_record_schema_is_refused_naming_both_versions():
    rec = new_record("reveal", target={"name": "x"}, tree=SumTree.pairwise(4).to_json(),
                     probe={})
    for schema in ("fpscope.record/3", "fpscope.record/0", "fpscope.profile/1"):
        with pytest.raises(RecordError) as info:
            validate_record(dict(rec, schema=schema), "r.json")
        msg = str(info.value)
        assert "\n" not in msg and repr(schema) in msg
        assert "'fpscope.record/1'" in msg and "'fpscope.record/2'" in msg


def test_deep_tree_record_from_the_cli(tmp_path, capsys):
    out = tmp_path / "mm.json"
    assert main(["reveal", "numpy.matmul", "--shape", "2x1100x3", "--record", str(out),
                 "--samples", "4"]) == 0
    capsys.readouterr()
    assert main(["diff", str(out), str(out)]) == 0
    assert main(["verify", str(out), "--samples", "4"]) == 0


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5)
                     | st.floats(allow_nan=False, allow_infinity=False),
                     lambda kids: st.lists(kids, max_size=4)
                     | st.dictionaries(st.text(max_size=4), kids, max_size=4), max_leaves=25)


@settings(max_examples=200, deadline=None)
@given(_json)
def test_explicit_stack_parser_equals_json(value):
    text = json.dumps(value)
    assert _deep_loads(text) == json.loads(text)
    assert json.loads(json_text(value)) == value


@pytest.mark.parametrize("bad", ["[1,2", "{\"a\" 1}", "[1]]", "", "[1] 2"])
def test_explicit_stack_parser_refuses_bad_json(bad):
    with pytest.raises(json.JSONDecodeError):
        _deep_loads(bad)
    with pytest.raises(json.JSONDecodeError):
        json_loads(bad)
