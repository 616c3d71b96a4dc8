"""The one decoder and encoder between a record's document and the schema's dataclasses (``schema/codec.py``):
what a value of each annotated kind reads as when the document has it, lacks it or holds the wrong type, and
that a typed view written back is the document it was read from."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from nbscope.schema.codec import Encoded, Read, Time, Write, decode, decode_optional, encode, known, never
from nbscope.schema.model import Cell
from nbscope.schema.programs import Program, Work

FILES_RECORD = Path(__file__).resolve().parent / "files" / "records" / "cpu_forecast_f64_loop.json"


@dataclass(frozen=True, slots=True)
class Part:
    size: int | None
    name: str

    @staticmethod
    def present(value: Mapping[str, object]) -> bool:
        return bool(value)


@dataclass(frozen=True, slots=True)
class Whole:
    count: int
    share: float | None
    flag: bool | None
    wait: Time
    tags: tuple[str, ...]
    parts: tuple[Part, ...]
    by_name: Mapping[str, int]
    first: Part | None
    renamed: Annotated[str | None, Read(key="old_name")]
    mode: Annotated[str, Read(otherwise="off")]


@dataclass(frozen=True, slots=True)
class Result(Encoded):
    side: Annotated[str | None, Write(key="winner")]
    part: Annotated[Part | None, Write(inline=True)]
    note: Annotated[str | None, Write(when=known)]
    ratio: float | None
    kept: Annotated[object, Write(when=never)] = None

    @property
    def document_keys(self) -> tuple[str, ...]:
        return (
            (("shown_as", "shown"), "side", "part", "note", "ratio", ("twice", Result.twice))
            if self.side
            else ("side", "note")
        )

    @property
    def shown(self) -> str:
        return f"{self.side} wins"

    def twice(self) -> str:
        return self.shown * 2


def test_a_result_writes_its_keys_renamed_inlined_left_out_and_in_its_own_order() -> None:
    assert Result("a", Part(1, "x"), None, float("inf"), kept=object()).to_dict() == {
        "shown_as": "a wins",
        "winner": "a",
        "size": 1,
        "name": "x",
        "ratio": None,
        "twice": "a winsa wins",
    }
    assert list(encode(Result(None, None, "why", 2.0))) == ["winner", "note"]


def test_each_kind_of_field_reads_the_document_or_unknown_never_a_guess() -> None:
    whole = decode(
        Whole,
        {
            "count": 3.0,
            "share": float("nan"),
            "flag": 1,
            "wait": -0.5,
            "tags": ["a", 2, "b"],
            "parts": [{"size": 2.0, "name": "x"}, "not an object", {"size": True}],
            "by_name": {"a": 1, "b": "2"},
            "first": {},
            "old_name": "kept",
            "mode": "",
        },
    )
    assert whole == Whole(
        count=3,
        share=None,
        flag=None,
        wait=None,
        tags=("a", "b"),
        parts=(Part(2, "x"), Part(None, "")),
        by_name={"a": 1},
        first=None,
        renamed="kept",
        mode="off",
    )
    assert decode(Whole, "not an object") == Whole(0, None, None, None, (), (), {}, None, None, "off")
    assert decode_optional(Part, None) is None and decode_optional(Part, {"name": "y"}) == Part(None, "y")


def test_a_recorded_program_and_cell_write_back_as_recorded() -> None:
    with open(FILES_RECORD, encoding="utf-8") as file:
        document = json.load(file)
    program = next(iter(document["measurements"]["programs"]["programs"].values()))
    typed = decode(Program, program)
    assert encode(typed.per_execution)["flops"] == program["per_execution"]["flops"]
    assert encode(typed.entry.plus(Work(1.0, None, None, None, None))) == {
        **{k: program["entry"][k] for k in ("flops", "transcendentals", "bytes", "flops_f64", "transcendentals_f64")},
        "flops": program["entry"]["flops"] + 1.0,
        "kernels": program["entry"]["kernels"],
        "conditionals": program["entry"]["conditionals"],
    }
    cell = document["measurements"]["cells"][0]
    assert decode(Cell, cell).code_line == cell["code_line"]
    assert decode(Cell, {**cell, "code_line": None}).code_line == cell["first_line"]


def _no_delta(row: Row) -> bool:
    return row.delta is None


@dataclass(frozen=True, slots=True)
class Size:
    size: int | None


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    delta: Annotated[float | None, Write(omit=_no_delta)]
    before: Annotated[Part | None, Write(null={})]
    part: Annotated[Size, Write(inline=True)]


def test_a_field_written_its_own_way_left_out_as_empty_or_into_its_owner() -> None:
    assert encode(Row("a", None, None, Size(1))) == {"name": "a", "before": {}, "size": 1}
    written = encode(Row("a", 0.5, Part(None, "b"), Size(1)))
    assert list(written) == ["name", "delta", "before", "size"] and written["before"] == {"size": None, "name": "b"}
    assert decode(Row, {"name": "a", "delta": 0.5, "part": {"size": 1}}).delta == 0.5
