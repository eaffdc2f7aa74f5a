"""How a sweep names a change in the trees by position when the node arithmetic stays."""

from fpscope.arithmetic import Arithmetic
from fpscope.sweep import SweepResult, classes_text


def _result(rows):
    res = SweepResult("rows")
    res.arithmetics = {"a1": Arithmetic.uniform(3, "fp32", "fp32", leaves=4)}
    res.rows = rows
    return res


def test_a_change_of_classes_names_the_trees_by_output_and_their_ranges():
    res = _result([
        {"value": 1, "tree_id": "A", "arithmetic_id": "a1", "error": None},
        {"value": 2, "tree_id": "A", "arithmetic_id": "a1", "error": None,
         "classes": ["A", "B"], "ranges": 2, "position_word": "output", "classes_id": "c1"},
    ])
    (ch,) = res.change_details
    assert ch["tree"] is None and ch["arithmetic"] is None
    assert ch["classes"] == {"name": "trees by output", "a": "A (every output)",
                             "b": "A,B (2 ranges)"}
    assert classes_text(res.rows[1]) == "A,B (2 ranges)"


def test_collective_rows_say_element_and_equal_classes_are_no_change():
    rows = [{"value": v, "tree_id": "A", "arithmetic_id": "a1", "error": None,
             "classes": list(c), "ranges": len(c), "position_word": "element",
             "classes_id": cid} for v, c, cid in ((2, "AB", "c1"), (3, "AB", "c1"),
                                                  (4, "ABC", "c2"))]
    res = _result(rows)
    assert res.changes == [(3, 4)]
    (ch,) = res.change_details
    assert ch["classes"]["name"] == "trees by element"
    assert (ch["classes"]["a"], ch["classes"]["b"]) == ("A,B (2 ranges)", "A,B,C (3 ranges)")
    assert ch["arithmetic"] is None
