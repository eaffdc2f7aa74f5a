"""Records hold trees of any depth: a sequential tree of n leaves is n - 1 levels deep, past
Python's recursion limit for json (found by fpscope matrix on numpy.matmul 2x1000x16)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpscope.cli import main
from fpscope.record import (
    _deep_loads,
    json_loads,
    json_text,
    load_record,
    new_record,
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
