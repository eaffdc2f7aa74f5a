"""How a sweep names a change in the trees by position when the node arithmetic stays."""

from fpscope.arithmetic import Arithmetic
from fpscope.sweep import SweepResult, classes_text


def _result(word_rows):
    res = SweepResult("rows")
    same = Arithmetic.uniform(3, "fp32", "fp32", leaves=4)
    res.arithmetics = {"a1": same, "a2": same}
    res.rows = word_rows
    return res


def test_a_change_of_classes_names_the_trees_by_output_and_their_ranges():
    res = _result([
        {"value": 1, "tree_id": "A", "arithmetic_id": "a1", "error": None},
        {"value": 2, "tree_id": "A", "arithmetic_id": "a2", "error": None,
         "classes": ["A", "B"], "ranges": 2, "position_word": "output"},
    ])
    (ch,) = res.change_details
    assert ch["tree"] is None
    assert ch["arithmetic"]["name"] == "trees by output"
    assert ch["arithmetic"]["a"] == "A (every output)"
    assert ch["arithmetic"]["b"] == "A,B (2 ranges)" == classes_text(res.rows[1])


def test_collective_rows_say_element():
    res = _result([
        {"value": 2, "tree_id": "A", "arithmetic_id": "a1", "error": None,
         "classes": ["A", "B"], "ranges": 2, "position_word": "element"},
        {"value": 3, "tree_id": "A", "arithmetic_id": "a2", "error": None,
         "classes": ["A", "B", "C"], "ranges": 3, "position_word": "element"},
    ])
    (ch,) = res.change_details
    assert ch["arithmetic"]["name"] == "trees by element"
    assert (ch["arithmetic"]["a"], ch["arithmetic"]["b"]) == ("A,B (2 ranges)", "A,B,C (3 ranges)")
