"""``NamedTuple`` for the records on the ``eps plan`` path, without importing ``typing``.

``from eps.core.records import NamedTuple`` is ``typing.NamedTuple`` to a type checker, and
at run time a class statement ``class Job(NamedTuple): ...`` makes the same class
``typing.NamedTuple`` makes: a ``collections.namedtuple`` (``_fields``, ``_field_defaults``,
``_make``, ``_replace``, ``_asdict``, ``__match_args__``, the same ``__new__``, repr and
pickling) with the annotations in ``__annotations__`` and the methods, properties and
docstring of the class body.  Two differences, both invisible to eps: the annotations are
kept as written (``typing`` would turn a string into a ``ForwardRef``), and
``__orig_bases__`` names this ``NamedTuple``, which :func:`is_record` recognises (cattrs'
``is_namedtuple`` looks for ``typing.NamedTuple`` there).

Why: ``typing`` costs about 6 ms of every ``eps plan`` (it imports ``contextlib`` and
``warnings`` too), and ``typing.NamedTuple`` checks every annotation and sets every
attribute of the class one by one, and ``collections.namedtuple`` compiles a ``__new__`` for
each class; this builds each class in one ``type()`` call, with a ``__new__`` whose code was
compiled with this module.
"""

import collections
from types import FunctionType

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NamedTuple

__all__ = ["NamedTuple", "is_record"]

# What a class body may not define (as for typing.NamedTuple), and what it defines that the
# namedtuple sets itself.
_PROHIBITED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults",
                         "_make", "_replace", "_asdict", "_source"})  # fmt: skip
_SPECIAL = frozenset({"__module__", "__name__", "__annotations__"})

_tuplegetter = collections._tuplegetter  # type: ignore[attr-defined]
_tuple_new = tuple.__new__
# collections.namedtuple's __new__ for 1..26 fields, ``lambda _cls, a, b: _tuple_new(_cls, (a, b))``,
# compiled with this module (into its .pyc) rather than by an eval per class at each start (the
# evals cost about a millisecond of every ``eps plan``); the field names are given to the code.
# fmt: off
_NEW_BY_ARITY: "tuple[Any, ...]" = (
    lambda _cls, a: _tuple_new(_cls, (a,)),
    lambda _cls, a, b: _tuple_new(_cls, (a, b)),
    lambda _cls, a, b, c: _tuple_new(_cls, (a, b, c)),
    lambda _cls, a, b, c, d: _tuple_new(_cls, (a, b, c, d)),
    lambda _cls, a, b, c, d, e: _tuple_new(_cls, (a, b, c, d, e)),
    lambda _cls, a, b, c, d, e, f: _tuple_new(_cls, (a, b, c, d, e, f)),
    lambda _cls, a, b, c, d, e, f, g: _tuple_new(_cls, (a, b, c, d, e, f, g)),
    lambda _cls, a, b, c, d, e, f, g, h: _tuple_new(_cls, (a, b, c, d, e, f, g, h)),
    lambda _cls, a, b, c, d, e, f, g, h, j: _tuple_new(_cls, (a, b, c, d, e, f, g, h, j)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k: _tuple_new(_cls, (a, b, c, d, e, f, g, h, j, k)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m: _tuple_new(_cls, (a, b, c, d, e, f, g, h, j, k, m)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m, n: _tuple_new(_cls, (a, b, c, d, e, f, g, h, j, k, m, n)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m, n, p: _tuple_new(_cls, (a, b, c, d, e, f, g, h, j, k, m, n, p)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m, n, p, q: _tuple_new(_cls, (a, b, c, d, e, f, g, h, j, k, m, n, p, q)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m, n, p, q, r: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, j, k, m, n, p, q, r)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v, w: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v, w)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v, w, x: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v, w, x)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v, w, x, y: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v, w, x, y)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v, w, x, y, z: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v, w, x, y, z)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v, w, x, y, z, A: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v, w, x, y, z, A)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v, w, x, y, z, A, B: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v, w, x, y, z, A, B)),
    lambda _cls, a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v, w, x, y, z, A, B, C: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, j, k, m, n, p, q, r, s, t, u, v, w, x, y, z, A, B, C)),
)
# fmt: on


def _new(typename: str, fields: "tuple[str, ...]", defaults: "tuple[Any, ...]") -> "Any":
    """``collections.namedtuple``'s ``__new__`` (the same code: ``_tuple_new(_cls, (a, b))``),
    with these field names."""
    n = len(fields)
    if 0 < n <= len(_NEW_BY_ARITY):
        code = _NEW_BY_ARITY[n - 1].__code__
    else:  # none or more fields: compiled here, as namedtuple does
        names = ", ".join(f"_{i}" for i in range(n))
        code = eval(f"lambda _cls, {names}: _tuple_new(_cls, ({names}))", {"_tuple_new": _tuple_new}).__code__  # noqa: S307
    code = code.replace(co_varnames=("_cls", *fields), co_filename="<string>", co_firstlineno=1)
    arg_list = ", ".join(fields) + ("," if n == 1 else "")
    glob = {"_tuple_new": _tuple_new, "__builtins__": {}, "__name__": f"namedtuple_{typename}"}
    new = FunctionType(code, glob, "__new__", defaults)
    new.__doc__ = f"Create new instance of {typename}({arg_list})"
    new.__qualname__ = f"{typename}.__new__"
    return new


def _namespace(typename: str, fields: "tuple[str, ...]", defaults: "tuple[Any, ...]") -> "dict[str, Any]":
    """The class namespace ``collections.namedtuple`` makes (its methods, as it writes them)."""
    n = len(fields)
    field_defaults = dict(zip(fields[n - len(defaults) :], defaults, strict=True)) if defaults else {}
    repr_fmt = "(" + ", ".join(f"{name}=%r" for name in fields) + ")"

    def _make(cls: "Any", iterable: "Any") -> "Any":
        result = _tuple_new(cls, iterable)
        if len(result) != n:
            raise TypeError(f"Expected {n} arguments, got {len(result)}")
        return result

    def _replace(self: "Any", /, **kwds: "Any") -> "Any":
        result = self._make(map(kwds.pop, fields, self))
        if kwds:
            raise ValueError(f"Got unexpected field names: {list(kwds)!r}")
        return result

    def __repr__(self: "tuple[Any, ...]") -> str:
        "Return a nicely formatted representation string"
        return self.__class__.__name__ + repr_fmt % self

    def _asdict(self: "Any") -> "dict[str, Any]":
        "Return a new dict which maps field names to their values."
        return dict(zip(self._fields, self))  # noqa: B905  (namedtuple's own, unchecked)

    def __getnewargs__(self: "Any") -> "tuple[Any, ...]":
        "Return self as a plain tuple.  Used by copy and pickle."
        return tuple(self)

    _make.__doc__ = f"Make a new {typename} object from a sequence or iterable"
    _replace.__doc__ = f"Return a new {typename} object replacing specified fields with new values"
    for method in (_make, _replace, __repr__, _asdict, __getnewargs__):
        method.__qualname__ = f"{typename}.{method.__name__}"
    arg_list = ", ".join(fields) + ("," if n == 1 else "")
    ns: dict[str, Any] = {
        "__doc__": f"{typename}({arg_list})",
        "__slots__": (),
        "_fields": fields,
        "_field_defaults": field_defaults,
        "__new__": _new(typename, fields, defaults),
        "_make": classmethod(_make),
        "_replace": _replace,
        "__repr__": __repr__,
        "_asdict": _asdict,
        "__getnewargs__": __getnewargs__,
        "__match_args__": fields,
    }
    for index, name in enumerate(fields):
        ns[name] = _tuplegetter(index, f"Alias for field number {index}")
    return ns


class _RecordMeta(type):
    def __new__(mcls, typename: str, bases: "tuple[type, ...]", body: "dict[str, Any]") -> "Any":
        if bases != (_Record,):
            raise TypeError("can only inherit from a NamedTuple type")
        types = body.get("__annotations__", {})
        defaulted: list[str] = []
        for name in types:  # as typing.NamedTuple says it
            if name in body:
                defaulted.append(name)
            elif defaulted:
                raise TypeError(f"Non-default namedtuple field {name} cannot follow default field"
                                f"{'s' if len(defaulted) > 1 else ''} {', '.join(defaulted)}")  # fmt: skip
        fields = tuple(types)
        ns = _namespace(typename, fields, tuple(body[name] for name in defaulted))
        for key, value in body.items():
            if key in _PROHIBITED:
                raise AttributeError("Cannot overwrite NamedTuple attribute " + key)
            if key not in _SPECIAL and key not in ns["_fields"]:
                ns[key] = value
        ns["__annotations__"] = types
        ns["__orig_bases__"] = (_Record,)
        ns["__module__"] = body["__module__"]
        record = type.__new__(type, typename, (tuple,), ns)
        record.__new__.__annotations__ = types
        return record


_Record = type.__new__(_RecordMeta, "NamedTuple", (), {"__module__": __name__})

if not TYPE_CHECKING:
    NamedTuple = _Record


def is_record(cls: object) -> bool:
    """Whether ``cls`` is (or derives from) a class made with this ``NamedTuple``."""
    return isinstance(cls, type) and issubclass(cls, tuple) and any(
        _Record in c.__dict__.get("__orig_bases__", ()) for c in cls.__mro__
    )  # fmt: skip
