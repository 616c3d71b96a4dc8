"""The optimised HLO that a ``jax.profiler`` session with ``enable_hlo_proto`` stores in its XSpace (and
the probe's own file of the HLO modules a cell compiled, :func:`hlo_modules`).

``jax.profiler.ProfileData`` reads planes, lines and events, but not a plane's event *metadata*, where
the profiler keeps one ``HloProto`` per live program (plane ``/host:metadata``, one metadata entry per
program named ``<module>(<program id>)`` with the stats ``Hlo Proto`` and ``program_id``). This reads
them from the protobuf wire format directly (field numbers from tsl/profiler/protobuf/xplane.proto):

    XSpace.planes = 1; XPlane.name = 2, .event_metadata = 4 (map<int64, XEventMetadata>),
    .stat_metadata = 5 (map<int64, XStatMetadata>); XEventMetadata.name = 2, .stats = 5;
    XStatMetadata.name = 2; XStat.metadata_id = 1, .int64_value = 4, .uint64_value = 3,
    .bytes_value = 6; HloProto.hlo_module = 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class HloProgram:
    """One program's optimised HLO module (serialised ``HloModuleProto``) and its id in the process."""

    name: str  # "jit_qm_jax(0)"
    module: str  # "jit_qm_jax"
    program_id: int | None
    module_proto: bytes


def _varint(buffer: memoryview, index: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = buffer[index]
        index += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, index
        shift += 7


def fields(buffer: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value) of one protobuf message; length-delimited values as views."""
    index, end = 0, len(buffer)
    while index < end:
        key, index = _varint(buffer, index)
        number, wire = key >> 3, key & 7
        value: int | memoryview
        if wire == 0:
            value, index = _varint(buffer, index)
        elif wire == 2:
            length, index = _varint(buffer, index)
            value = buffer[index : index + length]
            index += length
        elif wire == 1:
            value = int.from_bytes(buffer[index : index + 8], "little")
            index += 8
        elif wire == 5:
            value = int.from_bytes(buffer[index : index + 4], "little")
            index += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, wire, value


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclass(frozen=True, slots=True)
class _Stat:
    """An ``XStat`` (or, for ``metadata_id`` and ``name``, an ``XStatMetadata``), its fields by name: the last
    value of each field number, as protobuf reads a message; None: the message lacks it."""

    metadata_id: int | memoryview | None = None  # XStat.metadata_id = 1 (XStatMetadata.id = 1)
    name: int | memoryview | None = None  # XStatMetadata.name = 2
    uint64_value: int | memoryview | None = None  # XStat.uint64_value = 3
    int64_value: int | memoryview | None = None  # XStat.int64_value = 4
    bytes_value: int | memoryview | None = None  # XStat.bytes_value = 6


_STAT_FIELDS = {1: "metadata_id", 2: "name", 3: "uint64_value", 4: "int64_value", 6: "bytes_value"}


def _stat(message: memoryview) -> _Stat:
    return _Stat(**{_STAT_FIELDS[number]: value for number, _, value in fields(message) if number in _STAT_FIELDS})


def _map_value(entry: memoryview) -> memoryview | None:
    for number, wire, value in fields(entry):
        if number == 2 and wire == 2 and isinstance(value, memoryview):
            return value
    return None


def hlo_programs(xspace: bytes) -> list[HloProgram]:
    """The programs whose HLO a session with ``enable_hlo_proto`` recorded (empty if none)."""
    programs: list[HloProgram] = []
    for number, wire, plane in fields(memoryview(xspace)):
        if number != 1 or wire != 2 or not isinstance(plane, memoryview):
            continue
        name, metadata, stat_names = "", [], {}
        for field, field_wire, value in fields(plane):
            if field_wire != 2 or not isinstance(value, memoryview):
                continue
            if field == 2:
                name = bytes(value).decode("utf-8", "replace")
            elif field == 4:
                metadata.append(value)
            elif field == 5:
                stat = _map_value(value)
                if stat is not None:
                    described = _stat(stat)
                    identifier, stat_name = described.metadata_id, described.name
                    if isinstance(identifier, int) and isinstance(stat_name, memoryview):
                        stat_names[identifier] = bytes(stat_name).decode("utf-8", "replace")
        if name != "/host:metadata":
            continue
        for entry in metadata:
            event = _map_value(entry)
            if event is not None:
                program = _program(event, stat_names)
                if program is not None:
                    programs.append(program)
    return programs


def hlo_modules(data: bytes) -> list[HloProgram]:
    """The programs of a file of serialised ``HloModuleProto``s, each after its length (8 bytes, little-endian),
    as the probe writes what a cell compiled: ``HloModuleProto.name = 1``, ``.id = 5`` (the program id the
    profiler's events carry)."""
    programs: list[HloProgram] = []
    view, index = memoryview(data), 0
    while index + 8 <= len(view):
        size = int.from_bytes(view[index : index + 8], "little")
        module = view[index + 8 : index + 8 + size]
        index += 8 + size
        if len(module) != size:
            break  # a file cut short: what came whole is kept
        name, program_id = "", 0  # an id of 0 is not written (proto3's default)
        for field, wire, value in fields(module):
            if field == 1 and wire == 2 and isinstance(value, memoryview):
                name = bytes(value).decode("utf-8", "replace")
            elif field == 5 and wire == 0 and isinstance(value, int):
                program_id = _signed(value)
        programs.append(
            HloProgram(name=f"{name}({program_id})", module=name, program_id=program_id, module_proto=bytes(module))
        )
    return programs


def _program(event: memoryview, stat_names: dict[int, str]) -> HloProgram | None:
    name, proto, program_id = "", None, None
    for field, _wire, value in fields(event):
        if field == 2 and isinstance(value, memoryview):
            name = bytes(value).decode("utf-8", "replace")
        elif field == 5 and isinstance(value, memoryview):
            stat = _stat(value)
            key = stat.metadata_id
            kind = stat_names.get(key if isinstance(key, int) else -1, "")  # "": a stat the plane does not name
            hlo = stat.bytes_value
            if kind == "Hlo Proto" and isinstance(hlo, memoryview):
                proto = hlo
            elif kind == "program_id":
                raw = stat.int64_value if stat.int64_value is not None else stat.uint64_value
                program_id = _signed(raw) if isinstance(raw, int) else None
    if proto is None:
        return None
    module = None
    for field, wire, value in fields(proto):
        if field == 1 and wire == 2 and isinstance(value, memoryview):
            module = bytes(value)
    if module is None:
        return None
    base = name.rsplit("(", 1)[0] if name.endswith(")") else name
    return HloProgram(name=name, module=base, program_id=program_id, module_proto=module)
