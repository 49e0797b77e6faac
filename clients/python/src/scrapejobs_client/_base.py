"""The base of the generated models: building one from an API answer."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, ClassVar, TypeVar

M = TypeVar("M", bound="Model")


class Model:
    """A frozen dataclass built from the JSON the API answered. Fields the document does not
    name are kept in ``raw`` (the whole answer), so a newer service does not break an older client."""

    _nested: ClassVar[dict[str, str]] = {}
    _wire: ClassVar[dict[str, str]] = {}
    raw: dict[str, Any]

    @classmethod
    def from_dict(cls: type[M], data: dict[str, Any]) -> M:
        module = sys.modules[cls.__module__]
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name == "raw":
                continue
            value = data.get(cls._wire.get(f.name, f.name))
            inner = cls._nested.get(f.name)
            if inner is not None and value is not None:
                model = getattr(module, inner)
                value = (
                    [model.from_dict(v) for v in value] if isinstance(value, list) else model.from_dict(value)
                )
            values[f.name] = value
        return cls(**values, raw=data)  # type: ignore[call-arg]
