"""Detector tunables a user sets: the `[detectors.KIND]` tables of tracekit.toml.

Every detector declares its tunables as the fields of its frozen `Config`
(tracekit.detectors.base); a table sets some of them by name:

    [detectors.slow_start_overrun]
    min_lost_packets = 4

`parse_detector_tables` turns the tables into Config values, checked once, before any capture is
read: an unknown detector or setting, a value of the wrong type, or one out of its range is a
TracekitError of one line naming the file and the key. The values are plain frozen dataclasses of
numbers, so they pickle to any worker (batch's processes, a Dask cluster).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from tracekit.errors import TracekitError

if TYPE_CHECKING:
    from tracekit.detectors.base import Detector

# The range of a numeric tunable, by the unit its name ends with (base.UNIT_SUFFIXES): nothing a
# detector counts, measures or compares is negative, and a fraction is a part of a whole. A field
# narrows its range with metadata: dataclasses.field(default=..., metadata={"min": 1}) for a
# least value, {"above": 0} for a value that must exceed one (a window of zero round trips), and
# {"max": ...} for a greatest.
_FRACTION_SUFFIX = "_fraction"

# kind -> that detector's Config, for `run_detectors(configs=...)`.
DetectorConfigs = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Setting:
    """One tunable as a user sets it: its type and its range."""

    name: str
    type: str  # "int", "float", "bool" or "str"
    default: Any
    min: float | None = None
    above: float | None = None
    max: float | None = None

    def describe(self) -> str:
        """What the setting takes, for an error message: 'an integer >= 1'."""
        what = {"int": "an integer", "float": "a number", "bool": "true or false"}.get(
            self.type, "a string"
        )
        bounds = []
        if self.above is not None:
            bounds.append(f"> {self.above:g}")
        elif self.min is not None:
            bounds.append(f">= {self.min:g}")
        if self.max is not None:
            bounds.append(f"<= {self.max:g}")
        return f"{what} {' and '.join(bounds)}".rstrip()

    def parse(self, value: Any) -> Any:
        """The value as the Config field takes it; ValueError saying what it must be."""
        if self.type == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"must be {self.describe()}")
            return value
        if self.type == "str":
            if not isinstance(value, str):
                raise ValueError(f"must be {self.describe()}")
            return value
        numeric = int if self.type == "int" else int | float
        # TOML's true is no number, though Python's bool is an int.
        if isinstance(value, bool) or not isinstance(value, numeric):
            raise ValueError(f"must be {self.describe()}")
        # nan compares false with everything: a nan threshold would never fire or always fire.
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"must be {self.describe()}, finite (not nan or inf)")
        if (
            (self.min is not None and value < self.min)
            or (self.above is not None and value <= self.above)
            or (self.max is not None and value > self.max)
        ):
            raise ValueError(f"must be {self.describe()}")
        return value if self.type == "int" else float(value)


def _type_name(annotation: Any) -> str:
    """The field's type as a name: detectors use `from __future__ import annotations`."""
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    if name not in ("int", "float", "bool", "str"):
        # check_detector accepts any type; a tunable a user cannot write in TOML is a bug here.
        raise TypeError(f"a tunable of type {name or annotation!r} cannot be set from TOML")
    return name


def settings(cls: type[Detector]) -> dict[str, Setting]:
    """The tunables of a detector, by name, with their types and ranges."""
    found = {}
    for f in dataclasses.fields(cls.Config):
        kind = _type_name(f.type)
        meta = f.metadata
        numeric = kind in ("int", "float") and "above" not in meta
        floor = meta.get("min", 0 if numeric else None)
        ceiling = meta.get("max", 1 if f.name.endswith(_FRACTION_SUFFIX) else None)
        found[f.name] = Setting(f.name, kind, f.default, floor, meta.get("above"), ceiling)
    return found


def parse_detector_tables(
    value: Any, source: str, detectors: Collection[type[Detector]] | None = None
) -> dict[str, Any]:
    """The `detectors` table of a TOML document as {kind: Config}; errors name `source`.

    `detectors` are the detectors a table may name (every detector of tracekit by default).
    """
    if detectors is None:
        from tracekit.detectors import all_detectors

        detectors = all_detectors()
    by_kind = {cls.kind: cls for cls in detectors}
    if not isinstance(value, dict):
        raise TracekitError(
            f"{source}: detectors must hold one table per detector, [detectors.KIND], got {value!r}"
        )
    configs: dict[str, Any] = {}
    for kind, table in value.items():
        where = f"{source}: detectors.{kind}"
        cls = by_kind.get(kind)
        if cls is None:
            raise TracekitError(f"{where}: no such detector (known: {', '.join(sorted(by_kind))})")
        if not isinstance(table, dict):
            raise TracekitError(f"{where}: must be a table [detectors.{kind}], got {table!r}")
        known = settings(cls)
        changes = {}
        for key, raw in table.items():
            setting = known.get(key)
            if setting is None:
                names = ", ".join(known) if known else "this detector has no settings"
                raise TracekitError(f"{where}.{key}: no such setting ({names})")
            try:
                changes[key] = setting.parse(raw)
            except ValueError as exc:
                raise TracekitError(f"{where}.{key}: {exc}, got {raw!r}") from None
        configs[kind] = cls.Config(**changes)
    return configs


def non_defaults(configs: DetectorConfigs) -> list[str]:
    """`kind.name=value` for every setting that differs from its default, sorted: what an
    analysis was tuned with (batch keeps it in each input's fingerprint)."""
    changed = []
    for kind, config in configs.items():
        for f in dataclasses.fields(config):
            value = getattr(config, f.name)
            if value != f.default:
                changed.append(f"{kind}.{f.name}={value!r}")
    return sorted(changed)
