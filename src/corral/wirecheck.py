"""Type checks of wire JSON against the dataclasses it decodes to (issue 11, item 1).

``check(JobSubmission, body)`` walks the field annotations of the target dataclass and
raises ``FieldError`` naming the first field whose JSON value has the wrong type (a string
``begin_time``, a non-list ``env``, a float ``uid``), is out of range (integers beyond 64
bits, non-finite floats), or is unknown. The front door (``corral.controller.intake``)
calls it before anything is built, so a wrong-typed body is a 400 naming the field and
never reaches the store or the scheduling core.

The checkers are compiled once per class from its type hints; a check is a handful of
``isinstance`` calls per field (the submit path is hot).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from enum import Enum
from typing import Any

INT_MIN = -(2 ** 63)
INT_MAX = 2 ** 63 - 1

Checker = Callable[[Any, str], None]


class FieldError(ValueError):
    """A JSON value that does not fit its field: ``field`` is its dotted path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, (list, tuple)):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def check_int(v: Any, path: str) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise FieldError(path, f"expected an integer, got {_kind(v)}")
    if not INT_MIN <= v <= INT_MAX:
        raise FieldError(path, "integer out of range (64 bits)")


def check_float(v: Any, path: str) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise FieldError(path, f"expected a number, got {_kind(v)}")
    if isinstance(v, int):
        check_int(v, path)
    elif not math.isfinite(v):
        raise FieldError(path, "expected a finite number")


def check_str(v: Any, path: str) -> None:
    if not isinstance(v, str):
        raise FieldError(path, f"expected a string, got {_kind(v)}")


def check_bool(v: Any, path: str) -> None:
    if not isinstance(v, bool):
        raise FieldError(path, f"expected true or false, got {_kind(v)}")


def _any(_v: Any, _path: str) -> None:
    return None


_CACHE: dict[Any, Checker] = {}


def checker(tp: Any) -> Checker:
    """The checker of JSON values for the Python type ``tp``."""
    key = tp
    try:
        found = _CACHE.get(key)
    except TypeError:  # an unhashable annotation
        found, key = None, None
    if found is not None:
        return found
    out = _build(tp)
    if key is not None:
        _CACHE[key] = out
    return out


def _build(tp: Any) -> Checker:
    if tp is Any or tp is object:
        return _any
    if tp is bool:
        return check_bool
    if tp is int:
        return check_int
    if tp is float:
        return check_float
    if tp is str:
        return check_str
    if isinstance(tp, type) and issubclass(tp, Enum):
        values = {m.value for m in tp}
        name = tp.__name__

        def check_enum(v: Any, path: str) -> None:
            if isinstance(v, tp):
                return
            try:
                ok = v in values
            except TypeError:
                ok = False
            if not ok:
                raise FieldError(path, f"not a valid {name}: {v!r:.80}")
        return check_enum
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_checker(tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        allow_none = type(None) in args
        inner = [checker(a) for a in args if a is not type(None)]

        def check_union(v: Any, path: str) -> None:
            if v is None:
                if allow_none:
                    return
                raise FieldError(path, "must not be null")
            if len(inner) == 1:
                inner[0](v, path)
                return
            errors = []
            for c in inner:
                try:
                    c(v, path)
                    return
                except FieldError as exc:
                    errors.append(exc.message)
            raise FieldError(path, "; ".join(errors))
        return check_union
    if origin in (tuple, list, set, frozenset):
        if origin is tuple and args and (len(args) != 2 or args[1] is not Ellipsis):
            items = [checker(a) for a in args]

            def check_fixed(v: Any, path: str) -> None:
                if not isinstance(v, (list, tuple)):
                    raise FieldError(path, f"expected a list, got {_kind(v)}")
                if len(v) != len(items):
                    raise FieldError(path, f"expected {len(items)} items, got {len(v)}")
                for i, (c, x) in enumerate(zip(items, v, strict=True)):
                    c(x, f"{path}[{i}]")
            return check_fixed
        each = checker(args[0]) if args else _any
        strs = each is check_str

        def check_seq(v: Any, path: str) -> None:
            if not isinstance(v, (list, tuple)):
                raise FieldError(path, f"expected a list, got {_kind(v)}")
            if strs and all(type(x) is str for x in v):
                return  # the common case, without a path per item
            for i, x in enumerate(v):
                each(x, f"{path}[{i}]")
        return check_seq
    if origin is dict or tp is dict:
        kc = checker(args[0]) if args else _any
        vc = checker(args[1]) if len(args) > 1 else _any
        strs = kc is check_str and vc is check_str

        def check_map(v: Any, path: str) -> None:
            if not isinstance(v, dict):
                raise FieldError(path, f"expected an object, got {_kind(v)}")
            if strs and all(type(k) is str and type(x) is str for k, x in v.items()):
                return  # an environment: no path built per entry unless one is wrong
            for k, x in v.items():
                kc(k, f"{path} key")
                vc(x, f"{path}.{k}")
        return check_map
    return _any  # a type the wire never carries: no check


def _dataclass_checker(cls: type) -> Checker:
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    required = {f.name for f in fields if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING}
    slots: dict[str, Checker] = {}
    quick: dict[str, frozenset[type]] = {}

    def check_obj(v: Any, path: str) -> None:
        if not slots:  # filled lazily: a class may refer to itself
            for f in fields:
                hint = hints.get(f.name, Any)
                slots[f.name] = checker(hint)
                types_ = _quick_types(hint)
                if types_:
                    quick[f.name] = types_
        if not isinstance(v, dict):
            raise FieldError(path or cls.__name__, f"expected an object, got {_kind(v)}")
        prefix = path + "." if path else ""
        for k, x in v.items():
            q = quick.get(k) if type(k) is str else None
            if q is not None:  # a plain value its checker would pass: no call, no path
                tx = type(x)
                if tx in q and (tx is not int or INT_MIN <= x <= INT_MAX) and (
                        tx is not float or math.isfinite(x)):
                    continue
            c = slots.get(k) if isinstance(k, str) else None
            if c is None:
                raise FieldError(prefix + str(k), f"unknown field of {cls.__name__}")
            c(x, prefix + k)
        missing = required - v.keys()
        if missing:
            raise FieldError(prefix + sorted(missing)[0], "required field missing")
    return check_obj


_PLAIN: dict[Any, frozenset[type]] = {
    str: frozenset({str}), int: frozenset({int}), bool: frozenset({bool}),
    float: frozenset({float, int}),
}


def _quick_types(tp: Any) -> frozenset[type]:
    """The exact types of JSON values that ``checker(tp)`` passes as they are (ints within
    64 bits, finite floats): ``str``, ``int``, ``float``, ``bool`` and their optionals;
    empty for anything else (those values always go through the checker)."""
    try:
        if tp in _PLAIN:
            return _PLAIN[tp]
    except TypeError:  # an unhashable annotation
        return frozenset()
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2 and rest[0] in _PLAIN:
            return _PLAIN[rest[0]] | {type(None)}
    return frozenset()


def check(cls: type, data: Any, path: str = "") -> None:
    """Raise ``FieldError`` unless ``data`` is valid JSON for the dataclass ``cls``."""
    checker(cls)(data, path)
