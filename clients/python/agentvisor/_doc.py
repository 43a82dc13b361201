"""The base of the generated document classes: strict decoding and
encoding against the constraints the generator copied from the schemas."""

import dataclasses
import json
import keyword
import re

from .errors import AgentvisorError

_PY_TYPES = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def _attr(prop):
    return prop + "_" if keyword.iskeyword(prop) else prop


class DocumentError(AgentvisorError):
    """A document that does not follow its schema; the message names the
    field. Its code is the caller's (INVALID_TASK, INVALID_COMMAND, or
    INTERNAL_ERROR for what the runtime wrote)."""


def _check(value, spec, where, code):
    """Checks one value against its field's constraints; returns it as the
    dataclass holds it (a nested object as its class)."""
    from . import types  # the generated module imports this one

    def bad(msg):
        raise DocumentError(code, f"{where}: {msg}")

    kinds = spec.get("type")
    if kinds:
        ok = any(isinstance(value, _PY_TYPES[k]) and not (k in ("integer", "number") and isinstance(value, bool)) for k in kinds)
        if "integer" in kinds and isinstance(value, float) and value.is_integer():
            value, ok = int(value), True
        if not ok:
            bad(f"want {' or '.join(kinds)}, got {type(value).__name__}")
    if "const" in spec and value != spec["const"]:
        bad(f"want {spec['const']!r}")
    if "enum" in spec and value not in spec["enum"]:
        bad(f"{value!r} is not one of {', '.join(map(str, spec['enum']))}")
    if isinstance(value, str):
        if "minLength" in spec and len(value) < spec["minLength"]:
            bad("too short" if value else "required")
        if "maxLength" in spec and len(value) > spec["maxLength"]:
            bad(f"longer than {spec['maxLength']}")
        if "pattern" in spec and not re.search(spec["pattern"], value):
            bad("malformed")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in spec and value < spec["minimum"]:
            bad(f"below {spec['minimum']}")
        if "maximum" in spec and value > spec["maximum"]:
            bad(f"above {spec['maximum']}")
    if "class" in spec and value is not None:
        cls = types.CLASSES[spec["class"]]
        if isinstance(value, Document):
            value = value.to_dict()
        value = cls.from_dict(value, code=code, where=where)
    if "items" in spec and isinstance(value, list):
        if "maxItems" in spec and len(value) > spec["maxItems"]:
            bad(f"more than {spec['maxItems']} items")
        value = [_check(v, spec["items"], f"{where}[{i}]", code) for i, v in enumerate(value)]
    return value


class Document:
    """A protocol document: from_dict decodes (unknown fields, missing
    required ones, wrong types and values are refused), to_dict encodes
    (None fields are left out), from_json and to_json through JSON."""

    _FIELDS: dict = {}
    _OPEN = False
    _KIND = None

    @classmethod
    def from_dict(cls, data, code="INTERNAL_ERROR", where=None):
        where = where or cls.__name__
        if not isinstance(data, dict):
            raise DocumentError(code, f"{where}: want an object, got {type(data).__name__}")
        unknown = [k for k in data if k not in cls._FIELDS]
        if unknown and not cls._OPEN:
            raise DocumentError(code, f"{where}: field {unknown[0]}: unknown")
        values = {}
        for prop, spec in cls._FIELDS.items():
            if prop not in data or data[prop] is None and "null" not in spec.get("type", ()):
                if spec.get("required"):
                    raise DocumentError(code, f"{where}: field {prop}: required")
                continue
            values[_attr(prop)] = _check(data[prop], spec, f"{where}: field {prop}", code)
        return cls(**values)

    @classmethod
    def from_json(cls, text, code="INTERNAL_ERROR"):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise DocumentError(code, f"{cls.__name__}: not JSON: {e}") from None
        return cls.from_dict(data, code=code)

    def to_dict(self):
        out = {}
        for prop in self._FIELDS:
            value = getattr(self, _attr(prop))
            if value is None:
                continue
            out[prop] = _encode(value)
        return out

    def to_json(self):
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)

    def validate(self, code="INTERNAL_ERROR"):
        """Checks the document against its schema; returns it decoded anew."""
        return type(self).from_dict(self.to_dict(), code=code)


def _encode(value):
    if isinstance(value, Document):
        return value.to_dict()
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return value
