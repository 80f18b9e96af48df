"""The step schema is written once: validation, table features and the card's field list all follow it."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from repository import REPOSITORY
from synthetic import synthetic_steps

from themisto import trajectory
from themisto.building.card import field_list
from themisto.building.card_reading import parquet_path
from themisto.building.tables import TRAJECTORY_FEATURES, record_features, trajectory_row
from themisto.exceptions import TrajectoryError
from themisto.trajectory import (
    STEP_SCHEMA,
    VARIABLE_SCHEMA,
    SchemaField,
    Step,
    Variable,
    column,
    record_from_dict,
    schema_of,
    step_from_dict,
)

# A value of the wrong type for each kind of field (an int is no bool, a bool is no int).
WRONG = {str: 7, int: "7", float: "7.0", bool: 1, list: "[]", dict: "{}"}


def full_record() -> dict[str, Any]:
    """A step line with every field set, optional ones included, and one variable with every field set."""
    record = synthetic_steps("t", 3, error_rate=1.0)[1].to_dict()
    record["runtime"] = [
        {
            "name": "df",
            "type": "pandas.DataFrame",
            "size_bytes": 10,
            "repr": "x",
            "repr_truncated": True,
            "repr_failed": False,
            "shape": [1, 2],
            "len": 1,
            "size_method": "nbytes",
            "description": "columns (2): a int64, b str",
        }
    ]
    record.update(outputs=[{"output_type": "stream"}], original_output="o", output_length=1, stable=True)
    record.update(stable_norm=True, instability=["time"])
    return record


def where(record: dict[str, Any], nested: bool) -> dict[str, Any]:
    """The object holding ``field``: the step, or its first variable."""
    return record["runtime"][0] if nested else record


@pytest.mark.parametrize(
    ("field", "nested"),
    [(f, False) for f in STEP_SCHEMA] + [(f, True) for f in VARIABLE_SCHEMA],
    ids=lambda value: getattr(value, "name", str(value)),
)
def test_every_declared_field_is_validated_by_its_declaration(field: SchemaField, nested: bool) -> None:
    record = full_record()
    assert step_from_dict(copy.deepcopy(record)).to_dict() == record  # the full record is valid as it is
    wrong = copy.deepcopy(record)
    where(wrong, nested)[field.name] = WRONG[field.kind]
    with pytest.raises(TrajectoryError, match=f"field '{field.name}' has type"):
        step_from_dict(wrong)
    if field.nullable:
        nulled = copy.deepcopy(record)
        where(nulled, nested)[field.name] = None
        parsed = step_from_dict(nulled)
        assert getattr(parsed.runtime[0] if nested else parsed, field.name) is None
    elif field.kind is not dict:
        nulled = copy.deepcopy(record)
        where(nulled, nested)[field.name] = None
        with pytest.raises(TrajectoryError, match=f"'{field.name}' has type NoneType"):
            step_from_dict(nulled)
    missing = copy.deepcopy(record)
    del where(missing, nested)[field.name]
    if field.required:
        with pytest.raises(TrajectoryError, match=f"lacks field\\(s\\) {field.name}$"):
            step_from_dict(missing)
    else:
        parsed = step_from_dict(missing)
        holder = parsed.runtime[0] if nested else parsed
        declared = {f.name: f for f in dataclasses.fields(holder)}[field.name]
        default = declared.default if declared.default is not dataclasses.MISSING else declared.default_factory()  # type: ignore[operator]
        assert getattr(holder, field.name) == default


# Values a hostile or careless writer may put in any field: each kind's edge (an int past 64 bits, a bool for an
# int, text that is not ASCII, a lone surrogate), and lists whose items are such values.
_HOSTILE = [None, True, False, 0, -(2**63), 2**63 - 1, 2**63, -(2**63) - 1, 1.5, "", "x", "é", "\ud800", [], [1, 2]]
_HOSTILE += [[True], [2**63], ["1"], [1.0], [[1]], {}, {"a": "b"}]


def _built_field_by_field(record: dict[str, Any]) -> Any:
    """What the variable checks build of ``record`` without the shortcut for plain records, or the error."""
    try:
        return Variable(**trajectory._check_fields(record, trajectory._rules(Variable), "step runtime"))
    except TrajectoryError as exc:
        return str(exc)


@pytest.mark.parametrize("field", [field.name for field in VARIABLE_SCHEMA])
def test_a_variable_with_every_field_is_built_or_refused_as_the_field_by_field_checks_do(field: str) -> None:
    # the shortcut for a variable with exactly the schema's fields must accept what the checks accept, build the
    # same object and reject what they reject, with the same message
    for value in _HOSTILE:
        variable = {**full_record()["runtime"][0], field: value}
        expected = _built_field_by_field(copy.deepcopy(variable))
        try:
            got: Any = step_from_dict({**full_record(), "runtime": [variable]}).runtime[0]
        except TrajectoryError as exc:
            got = str(exc).replace("runtime[0]", "runtime")  # the item named, as the error path says
        assert got == expected, (field, value)
        if isinstance(got, Variable):
            assert vars(got) == vars(expected) and type(got) is Variable


def test_the_required_fields_are_the_designs() -> None:
    # the design's required step fields; every other field has a default, so older files stay valid
    required = ["trajectory_id", "step", "cell_id", "code", "output", "error", "execution_time", "memory_bytes"]
    required += ["runtime", "state_hash", "restarted"]
    assert [field.name for field in STEP_SCHEMA if field.required] == required
    assert [field.name for field in VARIABLE_SCHEMA if field.required] == ["name", "type", "size_bytes", "repr"]


def test_list_items_and_object_keys_are_checked_as_declared() -> None:
    record = full_record()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"instability": ["time", 3]}, "'instability' item has type int"),
        ({"error": {"ename": "E"}}, "'error' lacks field\\(s\\) evalue"),
        ({"error": {"ename": "E", "evalue": 1}}, "'error' field 'evalue' has type int"),
        ({"runtime": [{"name": "x"}]}, "runtime\\[0\\] lacks field\\(s\\) type, size_bytes, repr"),
    ]
    for bad, message in cases:
        with pytest.raises(TrajectoryError, match=message):
            step_from_dict({**record, **bad})
    record["runtime"][0]["shape"] = [1, "2"]
    with pytest.raises(TrajectoryError, match="'shape' item has type str"):
        step_from_dict(record)
    # raw outputs are stored as JSON text: any JSON shape is kept as it is
    odd = {**full_record(), "outputs": [1, "two", {"three": [3]}]}
    assert step_from_dict(odd).outputs == [1, "two", {"three": [3]}]


def test_the_trajectories_features_are_those_of_the_committed_build() -> None:
    committed = pq.read_schema(parquet_path(REPOSITORY / "hf_dataset", "trajectories", "full"))
    derived = TRAJECTORY_FEATURES.arrow_schema
    assert committed.equals(derived) and committed.metadata[b"huggingface"] == derived.metadata[b"huggingface"]
    assert list(TRAJECTORY_FEATURES) == [field.column for field in STEP_SCHEMA]


def test_a_step_and_its_row_round_trip_through_the_derived_features() -> None:
    steps = synthetic_steps("t", 40)
    table = pa.Table.from_pylist([trajectory_row(step) for step in steps], schema=TRAJECTORY_FEATURES.arrow_schema)
    for step, row in zip(steps, table.to_pylist(), strict=True):
        record = {field.name: row[field.column] for field in STEP_SCHEMA}
        record["outputs"] = json.loads(record["outputs"])
        assert step_from_dict(record) == step


def test_the_card_lists_every_field_with_its_type_and_description() -> None:
    card = (REPOSITORY / "hf_dataset" / "README.md").read_text(encoding="utf-8")
    card = card.split("`trajectories`, one row per recorded step:")[1]  # past the task configs' fields
    for field in STEP_SCHEMA + VARIABLE_SCHEMA:
        line = next(line for line in card.splitlines() if line.startswith(f"- `{field.column}` ("))
        assert line.endswith(field.doc.description)
        assert ("nullable" in line) == field.nullable
    assert "- `outputs_json` (string, JSON):" in card and "- `error` (object {ename, evalue}, nullable):" in card


@dataclasses.dataclass
class StepWithExtra(Step):
    """A step as it would be with one more declared field: the change another stage would make."""

    kernel_note: str | None = column("a note the kernel left, if it did", default=None)


def test_declaring_a_field_is_the_only_change_a_new_field_needs() -> None:
    schema = schema_of(StepWithExtra)
    assert schema[:-1] == STEP_SCHEMA and schema[-1].name == "kernel_note" and not schema[-1].required
    # validation
    record = full_record()
    assert record_from_dict(StepWithExtra, record, "line").kernel_note is None  # older files stay valid
    assert record_from_dict(StepWithExtra, {**record, "kernel_note": "boom"}, "line").kernel_note == "boom"
    with pytest.raises(TrajectoryError, match="'kernel_note' has type int"):
        record_from_dict(StepWithExtra, {**record, "kernel_note": 3}, "line")
    # table features and rows
    features = record_features(schema)
    assert features["kernel_note"] == datasets.Value("string")
    assert {k: v for k, v in features.items() if k != "kernel_note"} == dict(TRAJECTORY_FEATURES)
    # the card
    assert field_list(schema).splitlines()[-1] == (
        "- `kernel_note` (string, nullable): a note the kernel left, if it did"
    )
