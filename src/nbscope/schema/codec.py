"""The one decoder and encoder between a record's JSON document and the schema's frozen dataclasses, driven by
their annotations: ``decode(Cell, document)`` builds a cell, ``encode(cell)`` writes it back as JSON values.

How a field is read follows from its annotation, so that a figure means the same thing in every class:

* ``float | None`` a finite number (``_fields.number``), ``int | None`` a whole number, ``str | None`` a
  string, ``bool | None`` a JSON boolean: anything else reads as None (unknown), never as a guess;
* ``int``, ``float``, ``str``, ``bool`` (no None): a count (0), a figure (0.0), a text ("") or a flag (false)
  when the document lacks it;
* a dataclass: read from its object (an absent one reads as an empty one); ``X | None``: None unless the
  document holds an object (and ``X.present(object)`` when ``X`` says what counts as present);
* ``tuple[X, ...]`` and ``Mapping[str, X]``: their items read as ``X``, those that read as None left out unless
  ``X`` allows None; ``... | None``: None unless the document holds an array (an object);
* ``Annotated[T, Read(reader, key=...)]``: a field read its own way, or from another key;
* ``Annotated[T, Check(low, high, noun, rule, required, refused)]``: the values a field can hold, declared once
  beside it: a number outside ``low``..``high`` reads as unknown (None, or 0 for ``int``).

``strict(cls, document, where)`` is the decode of a document from elsewhere (a record loaded, imported or merged):
it refuses what the decode above would read as unknown or leave out, with the dotted path of the field and one line
(``Invalid``): a value of another JSON type, a null item of an array, a number outside its ``Check`` or one its
``rule`` refuses, and what the class's ``refuse`` finds wrong of the whole (cells out of order, totals that
disagree with them). Its result is the decode's (a record ``loads`` parsed keeps it as its typed view).

Writing (``encode``) lists a dataclass's fields in declaration order under their names, tuples as arrays, a
float that is not finite as null (JSON has none). A result that is only written (a command's ``--json``
document) may say more: ``Annotated[T, Write(key=..., when=..., omit=..., null=..., inline=...)]`` names a
field's key, leaves it out unless ``when`` holds of its value (or when ``omit`` holds of its owner: a figure
only some documents have), writes ``null`` in place of None, or writes an object's entries into its parent's;
an object that still writes itself (``to_dict``, not through ``Encoded``) is written so; a class's
``document_keys`` (a class attribute, or a property when the layout depends on the instance) lists the
attributes its document holds, in order, properties included (``(key, attribute)``: one written under
another key; ``(key, function)``: what a function of the object, such as a method, returns).

Decoding never raises: a document from elsewhere has passed ``strict`` once, at load (``schema.validate``). A
class may reshape its object before its fields are read (``reshape``: a fingerprint's GPUs sit at ``gpu.devices``).

Why the standard library: ``dataclasses.fields`` and ``typing.get_type_hints`` are all this needs (its reading,
writing and checking), they cost no import at start-up, and the model stays plain frozen, slotted dataclasses.
msgspec would decode faster but brings its own ``Struct`` model or converters for each of the readers above
(a bool is never a number, NaN never a figure, a wrong type reads as unknown rather than failing); cattrs
would need the same hooks registered per type, and a dependency, for no behaviour this lacks.
"""

from __future__ import annotations

import builtins
import copy
import dataclasses
import functools
import math
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

from nbscope.schema import _fields

T = TypeVar("T")
Reader = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Read:
    """How one field is read when its annotation alone does not say: ``reader`` takes the document's value,
    ``key`` names it when it is not the field's name, ``otherwise`` stands in for an empty one. (Named
    functions only: a lambda in an annotation is evaluated where the module's names are out of its reach.)"""

    reader: Reader | None = None
    key: str | None = None
    otherwise: Any = ...  # the value when the document's reads as empty ("", None, 0)


@dataclasses.dataclass(frozen=True, slots=True, eq=False)  # hashed by identity: ``null`` may be an object
class Write:
    """How one field is written when its name and annotation alone do not say: ``key`` names it in the document
    (else ``Read``'s key, else its name), ``when`` leaves it out unless true of the value (named functions
    only, as for ``Read``), ``omit`` leaves it out when true of its owner, ``null`` is written in place of None
    (a copy of it), ``inline`` writes an object's entries (nothing, for None) into its parent's."""

    key: str | None = None
    when: Callable[[Any], bool] | None = None
    omit: Callable[[Any], bool] | None = None
    null: Any = None
    inline: bool = False


_PLAIN = Write()

# No measured time is longer than this (about 115 days), no notebook has more code cells, no count is larger: a
# larger one is a crafted or broken record, which would print as an absurd figure and dominate every total.
MAX_SECONDS = 1e7
MAX_CELLS = 100_000
MAX_COUNT = 2**53


class Invalid(ValueError):
    """A value ``strict`` refuses, in one line: its dotted path (``measurements.cells[1].wall_s``) and what is wrong."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where} {problem}")


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """The values a field can hold beyond its type: a number from ``low`` to ``high`` (what it counts, ``noun``,
    names it in a refusal), and ``rule``, a named function saying what is wrong with a value (None: nothing)."""

    low: float = 0.0
    high: float = MAX_COUNT
    noun: str = "count"
    rule: Callable[[Any], str | None] | None = None
    required: str = ""  # the JSON type a document must hold there ("integer"), not null or nothing
    refused: bool = True  # False: a value outside reads as unknown, and ``strict`` keeps it (a tool's sentinel)

    def holds(self, value: object) -> bool:  # (NaN is refused by its type's check, before)
        return isinstance(value, bool) or not isinstance(value, (int, float)) or self.low <= value <= self.high

    def refuse(self, value: object, where: str) -> None:
        if value is None or value is _ABSENT:
            if self.required:
                raise Invalid(where, f"is {'null' if value is None else 'missing'}, not {a(self.required)}")
            return
        if isinstance(value, (int, float)) and self.refused and not self.holds(value):
            low = "negative" if self.low == 0 else f"below {self.low:g}"
            beyond = f": a {self.noun} cannot be {low}" if value < self.low else f", larger than any {self.noun}"
            raise Invalid(where, f"is {shown(value)}{beyond}")
        if self.rule is not None and (problem := self.rule(value)) is not None:
            raise Invalid(where, problem)


def shown(number: float) -> str:
    """A number as an error quotes it: as written up to 10 characters, else with 3 significant digits."""
    if isinstance(number, int) and abs(number) >= 10**300:
        return "a number of more than 300 digits"
    text = repr(number)
    return text if len(text) <= 10 else f"{float(number):.3g}"


def known(value: object) -> bool:
    """``Write(when=known)``: written unless None (absent, not null)."""
    return value is not None


def given(value: object) -> bool:
    """``Write(when=given)``: written unless empty (None, "", 0, an empty array or object); as a class's ``present``,
    an empty object is as good as an absent one (it says nothing)."""
    return bool(value)


def never(value: object) -> bool:
    """``Write(when=never)``: never written (the field is for readers of the result, not in its document)."""
    return False


class Encoded:
    """A result whose JSON document is its encoding (``to_dict()``: what its ``--json`` prints)."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        return typing.cast(dict[str, Any], encode(self))


# Fields read their own way, shared by the classes that have them.
Time = Annotated[float | None, Check(0, MAX_SECONDS, "measurement")]  # a duration: finite and not negative
Seconds = Annotated[float, Check(0, MAX_SECONDS, "measurement")]  # a duration, 0.0 when not recorded
Count = Annotated[int, Check()]  # how many of something: not negative
Index = Annotated[int, Check(0, MAX_CELLS, "cell index", required="integer")]  # a code cell's place in its notebook
Measured = Annotated[float | None, Read(_fields.figure)]  # a figure as recorded: an int stays an int in --json
MeasuredTime = Annotated[Measured, Check(0, MAX_SECONDS, "measurement")]  # a duration, as recorded
# a run without repeats ran once; one stopped before its first repeat finished records 0
Repeat = Annotated[int, Read(_fields.positive), Check(0, MAX_COUNT, "repeat count")]
Name = Annotated[str | None, Read(_fields.name)]  # a string, or what names it written as one (a run id)


def decode(cls: type[T], value: Any) -> T:
    """``cls`` read from the document's ``value`` (an object; anything else reads as an empty one)."""
    return _reader(typing.cast(Any, cls))(value)  # type: ignore[no-any-return]


def strict(cls: type[T], value: object, where: str) -> T:
    """``cls`` read from ``value``, a document from elsewhere at ``where`` (its dotted path), once nothing in it
    is impossible (``Invalid``, one line naming the field)."""
    _checker(typing.cast(Any, cls))(value, where)
    result = decode(cls, value)
    if (refuse := getattr(cls, "refuse", None)) is not None and (found := refuse(result)) is not None:
        raise Invalid(where + found[0], found[1])
    return result


def decode_optional(cls: type[T], value: Any) -> T | None:
    """``cls`` read from ``value``, or None when the document holds none (not an object, or not ``present``)."""
    return _optional(typing.cast(Any, cls))(value)  # type: ignore[no-any-return]


def encode(value: Any) -> Any:
    """A dataclass (or a tuple, a mapping of them) as JSON values: fields in declaration order (or its
    ``document_keys``, as their ``Write`` says), tuples as arrays, non-finite floats as null."""
    if not isinstance(value, (type, Encoded)) and (writer := getattr(value, "to_dict", None)) is not None:
        return writer()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        document: dict[str, Any] = {}
        writes = _writes(type(value))
        for entry in getattr(value, "document_keys", None) or writes:
            named, name = entry if isinstance(entry, tuple) else (None, entry)
            if callable(name):  # (key, a function of the object): a method's answer
                document[named] = encode(name(value))
                continue
            key, write = writes.get(name) or (name, _PLAIN)
            item = getattr(value, name)
            if (write.when is not None and not write.when(item)) or (write.omit is not None and write.omit(value)):
                continue
            written = encode(item) if item is not None or write.null is None else copy.deepcopy(write.null)
            if write.inline:
                document.update(written or {})
            else:
                document[named or key] = written
        return document
    if isinstance(value, (tuple, list)):
        return [encode(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): encode(item) for key, item in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@functools.cache
def _writes(cls: type) -> dict[str, tuple[str, Write]]:
    """How each field of ``cls`` is written: its key and its ``Write`` (in declaration order)."""
    writes = {}
    for field in dataclasses.fields(cls):
        hint = _annotated(cls, field)
        marks = typing.get_args(hint)[1:] if hint is not None else ()
        write = next((m for m in marks if isinstance(m, Write)), _PLAIN)
        read = next((m for m in marks if isinstance(m, Read)), Read())
        writes[field.name] = (write.key or read.key or field.name, write)
    return writes


class _Names(dict[str, Any]):
    """A module's names, where a name it imports only for type checking reads as ``Any``."""

    def __missing__(self, name: str) -> Any:
        return getattr(builtins, name, Any)


def _annotated(cls: type, field: dataclasses.Field[Any]) -> Any:
    """A field's ``Annotated`` hint, evaluated on its own and leniently (it may name a class its module imports
    only for type checking: only its markers matter here); None for a plain one."""
    hint = field.type
    if isinstance(hint, str):
        if not hint.startswith("Annotated["):
            return None
        names = vars(sys.modules[cls.__module__])
        hint = eval(hint, names, _Names(names))  # as typing.get_type_hints evaluates it
    return hint if typing.get_origin(hint) is typing.Annotated else None


# ---- readers by annotation ----------------------------------------------------------------------------------

_SCALARS: dict[Any, Reader] = {
    int: lambda v: int(n) if (n := _fields.number(v)) is not None else 0,
    float: lambda v: _fields.number(v) or 0.0,
    str: lambda v: str(v or ""),
    bool: bool,
}
_OPTIONAL_SCALARS: dict[Any, Reader] = {
    int: _fields.whole,
    float: _fields.number,
    str: _fields.text,
    bool: lambda v: v if isinstance(v, bool) else None,
}


@functools.cache
def _reader(hint: Any) -> Reader:
    """How a value annotated ``hint`` is read from the document."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        marker = _marker(hint)
        reader = _bounded(hint, marker.reader or _reader(args[0]))
        if marker.otherwise is ...:
            return reader
        return lambda v: reader(v) or marker.otherwise
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        return _optional(present[0]) if len(present) == 1 else (lambda v: v)
    if hint in _SCALARS:
        return _SCALARS[hint]
    if origin is tuple:
        return _items(args[0]) if len(args) == 2 and args[1] is Ellipsis else (lambda v: v)
    if origin is not None and issubclass(origin, Mapping):
        return _entries(args[1])
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _object(hint)
    return lambda v: v  # Any: kept as recorded


def _bounded(hint: object, reader: Reader) -> Reader:
    """``reader``, where a value its ``Check`` does not hold reads as unknown (what an absent one reads as)."""
    checks = [m for m in typing.get_args(hint)[1:] if isinstance(m, Check)]
    if not checks:
        return reader
    unknown = reader(None)
    return lambda v: read if all(c.holds(read := reader(v)) for c in checks) else unknown


def _marker(hint: Any) -> Read:
    """The ``Read`` of an ``Annotated`` field (an empty one when it has none)."""
    return next((a for a in typing.get_args(hint)[1:] if isinstance(a, Read)), Read())


@functools.cache
def _optional(hint: Any) -> Reader:
    """``hint | None``: None when the document holds nothing of its shape."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _bounded(hint, _marker(hint).reader or _optional(typing.get_args(hint)[0]))
    if hint in _OPTIONAL_SCALARS:
        return _OPTIONAL_SCALARS[hint]
    read = _reader(hint)
    if origin is tuple:
        return lambda v: read(v) if isinstance(v, list) else None
    if dataclasses.is_dataclass(hint):
        present = getattr(hint, "present", None)
        return lambda v: read(v) if isinstance(v, Mapping) and (present is None or present(v)) else None
    if origin is not None and issubclass(origin, Mapping):
        return lambda v: read(v) if isinstance(v, Mapping) else None
    return read


def _allows_none(hint: Any) -> bool:
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return hint is Any or type(None) in typing.get_args(hint)


def _items(hint: Any) -> Reader:
    read, keep_none = _item(hint)

    def items(value: Any) -> tuple[Any, ...]:
        if not isinstance(value, (list, tuple)):
            return ()
        return tuple(v for v in map(read, value) if keep_none or v is not None)

    return items


def _entries(hint: Any) -> Reader:
    if hint is Any:
        return lambda v: v if isinstance(v, Mapping) else {}
    read, keep_none = _item(hint)

    def entries(value: Any) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            return {}
        found = ((str(k), read(v)) for k, v in value.items())
        return {k: v for k, v in found if keep_none or v is not None}

    return entries


def _item(hint: Any) -> tuple[Reader, bool]:
    """How an item of an array or an object is read, and whether one that reads as None is kept (only when
    its annotation allows None; else it is left out, not defaulted)."""
    keep_none = _allows_none(hint)
    return (_reader(hint) if keep_none else _optional(hint)), keep_none


def _object(cls: type) -> Reader:
    hints = typing.get_type_hints(cls, include_extras=True)
    plan = []
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        plan.append((field.name, _marker(hint).key or field.name, _reader(hint)))
    reshape = getattr(cls, "reshape", None)

    def read_object(value: Any) -> Any:
        value = value if isinstance(value, Mapping) else {}
        if reshape is not None:
            value = reshape(value)
        return cls(**{name: read(value.get(key)) for name, key, read in plan})

    return read_object


# ---- strict: what a document from elsewhere may not hold -------------------------------------------------

Checker = Callable[[object, str], None]
_JSON_TYPES = ((bool, "boolean"), ((int, float), "number"), (str, "string"), (list, "array"), (Mapping, "object"))
_WANTED: dict[Any, tuple[str, Callable[[Any], bool]]] = {  # a scalar's JSON type, and whether a value is one
    int: ("integer", lambda v: _fields.whole(v) is not None),
    float: ("number", lambda v: _fields.figure(v) is not None),
    str: ("string", lambda v: isinstance(v, str)),
    bool: ("boolean", lambda v: isinstance(v, bool)),
}


def json_type(value: object) -> str:
    """``string``, ``object``, ``null``: a value's JSON type, as an error names it."""
    return "null" if value is None else next((n for t, n in _JSON_TYPES if isinstance(value, t)), type(value).__name__)


def a(type_name: str) -> str:
    """``a string``, ``an object``, ``null``."""
    return type_name if type_name == "null" else ("an " if type_name[0] in "aeiou" else "a ") + type_name


def _refused(where: str, value: object, wanted: str) -> Invalid:
    if isinstance(value, float) and not math.isfinite(value):
        return Invalid(where, f"is {value!r}, not a finite number")
    return Invalid(where, f"is {a(json_type(value))}, not {a(wanted)}")


_ABSENT = object()  # a field its object lacks (null is None)


def _anything(value: object, where: str) -> None:
    return None


@functools.cache
def _checker(hint: object) -> Checker:
    """How a value annotated ``hint`` is checked (``strict``); a field read its own way (``Read(reader)``) is
    checked only by its ``Check``, and as a number when it is one (a ``Measured`` figure)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        numeric = args[0] in (int, float, int | None, float | None)
        inner = _checker(args[0]) if _marker(hint).reader is None or numeric else _anything
        checks = [m for m in args[1:] if isinstance(m, Check)]

        def annotated(value: object, where: str) -> None:
            inner(value, where)
            for check in checks:
                check.refuse(value, where)

        return annotated if checks else inner
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        optional = _checker(present[0]) if len(present) == 1 else _anything
        return lambda value, where: None if value is None or value is _ABSENT else optional(value, where)
    if hint in _WANTED:
        wanted, holds = _WANTED[hint]

        def scalar(value: object, where: str) -> None:
            if value is not None and value is not _ABSENT and not holds(value):
                raise _refused(where, value, wanted)

        return scalar
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _container(list, "array", args[0])
    if origin is not None and issubclass(origin, Mapping):
        return _container(Mapping, "object", args[1])
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _strict_object(hint)
    return _anything


def _container(kind: type, wanted: str, item_hint: object) -> Checker:
    item, keep_none = _checker(item_hint), _allows_none(item_hint)
    item_type = _wanted_type(item_hint)

    def container(value: object, where: str) -> None:
        if value is None or value is _ABSENT:
            return
        if not isinstance(value, kind):
            raise _refused(where, value, wanted)
        pairs: Any = value.items() if isinstance(value, Mapping) else enumerate(typing.cast(list[Any], value))
        for key, entry in pairs:
            at = f"{where}.{step(key)}" if isinstance(value, Mapping) else f"{where}[{key}]"
            if entry is None and not keep_none:
                raise _refused(at, entry, item_type)
            item(entry, at)

    return container


def step(key: object) -> str:
    """A key as a path names it: as written, or quoted when it holds what would break the line (``'a\\nb'``)."""
    text = str(key)
    return text if text.isprintable() and len(text) <= 60 else repr(text[:60])


def _wanted_type(hint: object) -> str:
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    origin = typing.get_origin(hint) or hint
    return (
        "object" if dataclasses.is_dataclass(hint) or origin in (Mapping, dict) else _WANTED.get(origin, ("array",))[0]
    )


def _strict_object(cls: type) -> Checker:
    hints = typing.get_type_hints(cls, include_extras=True)
    plan = [(_marker(hints[f.name]).key or f.name, _checker(hints[f.name])) for f in dataclasses.fields(cls)]
    reshape = getattr(cls, "reshape", None)

    def strict_object(value: object, where: str) -> None:
        if value is None or value is _ABSENT:
            return
        if not isinstance(value, Mapping):
            raise _refused(where, value, "object")
        shaped = reshape(value) if reshape is not None else value
        for key, check in plan:  # a document's own fields are named as such: field 'kind'
            check(shaped.get(key, _ABSENT), f"{where}.{step(key)}" if where else f"field {key!r}")

    return strict_object
