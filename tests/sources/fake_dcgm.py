"""Fake ``pydcgm``, ``dcgm_structs`` and ``dcgm_fields`` modules: the DCGM library boundary.

``install(monkeypatch, engine)`` puts them into ``sys.modules`` so that
``DcgmSource`` imports them as it would NVIDIA's bindings. ``FakeEngine`` plays
the host engine: its GPUs, their field values, whether it answers at all and
whether it accepts the profiling fields.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

DCGM_ST_CONNECTION_NOT_VALID = -6
DCGM_ST_PROFILING_NOT_SUPPORTED = -38
BLANK = object()  # a value DCGM left blank


class DCGMError(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.value = status


@dataclass
class FakeEngine:
    # gpu id -> (uuid, name, {field id: value or BLANK})
    gpus: dict[int, tuple[str, str, dict[int, Any]]] = field(default_factory=dict)
    address: str = "localhost:5555"
    profiling: bool = True
    down: bool = False  # GetLatest fails (the engine died after start)
    connects: list[str] = field(default_factory=list)
    watches: list[tuple[str, tuple[int, ...], int]] = field(default_factory=list)
    unwatched: list[str] = field(default_factory=list)
    deleted_groups: list[str] = field(default_factory=list)
    shutdowns: int = 0


def install(monkeypatch: pytest.MonkeyPatch, engine: FakeEngine) -> None:
    structs = types.ModuleType("dcgm_structs")
    structs.DCGMError = DCGMError  # type: ignore[attr-defined]
    structs.DCGM_OPERATION_MODE_AUTO = 1  # type: ignore[attr-defined]
    fields_mod = types.ModuleType("dcgm_fields")

    class FieldGroup:
        def __init__(self, handle: Handle, name: str = "", fieldIds: list[int] | None = None):  # noqa: N803
            self.name = name
            self.fieldIds = list(fieldIds or [])

        def Delete(self) -> None:  # noqa: N802
            pass

    class Samples:
        def __init__(self, group: Group) -> None:
            self.group = group

        def WatchFields(self, fg: FieldGroup, freq_us: int, age_s: float, keep: int) -> None:  # noqa: N802
            if not engine.profiling and any(1001 <= f <= 1012 for f in fg.fieldIds):
                raise DCGMError(
                    DCGM_ST_PROFILING_NOT_SUPPORTED,
                    "Profiling is not supported for this group of GPUs or GPU",
                )
            engine.watches.append((fg.name, tuple(fg.fieldIds), freq_us))

        def UnwatchFields(self, fg: FieldGroup) -> None:  # noqa: N802
            engine.unwatched.append(fg.name)

        def GetLatest(self, fg: FieldGroup) -> SimpleNamespace:  # noqa: N802
            if engine.down:
                raise DCGMError(
                    DCGM_ST_CONNECTION_NOT_VALID, "Host engine connection invalid/disconnected"
                )
            values: dict[int, dict[int, list[Any]]] = {}
            for gid in self.group.gpu_ids:
                row = engine.gpus[gid][2]
                values[gid] = {
                    f: [
                        SimpleNamespace(
                            value=None if row[f] is BLANK else row[f], isBlank=row[f] is BLANK
                        )
                    ]
                    for f in fg.fieldIds
                    if f in row
                }
            return SimpleNamespace(values=values)

    class Group:
        def __init__(self, name: str, gpu_ids: list[int]) -> None:
            self.name = name
            self.gpu_ids = list(gpu_ids)
            self.samples = Samples(self)

        def Delete(self) -> None:  # noqa: N802
            engine.deleted_groups.append(self.name)

    class System:
        def __init__(self) -> None:
            self.discovery = SimpleNamespace(
                GetAllSupportedGpuIds=lambda: list(engine.gpus),
                GetGpuAttributes=lambda gid: SimpleNamespace(
                    identifiers=SimpleNamespace(
                        uuid=engine.gpus[gid][0], deviceName=engine.gpus[gid][1]
                    )
                ),
            )

        def GetGroupWithGpuIds(self, name: str, gpu_ids: list[int]) -> Group:  # noqa: N802
            return Group(name, gpu_ids)

    class Handle:
        def __init__(
            self, handle: Any = None, ipAddress: str | None = None, opMode: int = 1
        ) -> None:  # noqa: N803
            engine.connects.append(str(ipAddress))
            if ipAddress != engine.address:
                raise DCGMError(
                    DCGM_ST_CONNECTION_NOT_VALID, "Host engine connection invalid/disconnected"
                )

        def GetSystem(self) -> System:  # noqa: N802
            return System()

        def Shutdown(self) -> None:  # noqa: N802
            engine.shutdowns += 1

    pydcgm = types.ModuleType("pydcgm")
    pydcgm.DcgmHandle = Handle  # type: ignore[attr-defined]
    pydcgm.DcgmFieldGroup = FieldGroup  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pydcgm", pydcgm)
    monkeypatch.setitem(sys.modules, "dcgm_structs", structs)
    monkeypatch.setitem(sys.modules, "dcgm_fields", fields_mod)
