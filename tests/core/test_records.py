"""eps.core.records.NamedTuple makes the classes typing.NamedTuple makes (without importing
typing): the same fields, defaults, signature, methods, docs, repr, pickling and errors.
(No postponed annotations here: typing.NamedTuple would turn them into ForwardRefs, and the
records' modules do not postpone theirs.)"""

import inspect
import pickle
import typing
from typing import Any

import pytest

from eps.core import model, records


def _pair(nt: Any) -> Any:
    class Rec(nt):  # type: ignore[misc, valid-type]
        """A record."""

        name: str
        count: int | None = None
        tags: tuple[str, ...] = ()

        @property
        def shout(self) -> str:
            return self.name.upper()

        def twice(self) -> int:
            return 2 * (self.count or 0)

    class Bare(nt):  # type: ignore[misc, valid-type]
        only: int

    return Rec, Bare


def _describe(cls: Any) -> dict[str, str]:
    new = cls.__new__
    keys = ("_fields", "_field_defaults", "__annotations__", "__doc__", "__match_args__", "__slots__", "__name__",
            "__bases__")  # fmt: skip
    d: dict[str, Any] = {k: getattr(cls, k) for k in keys}
    d["qualname"] = cls.__qualname__.rsplit(".", 1)[-1]
    d["keys"] = sorted(k for k in vars(cls) if k != "__orig_bases__")
    d["signature"] = inspect.signature(cls)
    d["new"] = (new.__name__, new.__qualname__.rsplit(".", 2)[-2:], new.__doc__, new.__defaults__, new.__kwdefaults__,
                new.__annotations__, new.__module__, new.__code__.co_varnames, new.__code__.co_argcount)  # fmt: skip
    for name in ("_make", "_replace", "__repr__", "_asdict", "__getnewargs__"):
        f = getattr(getattr(cls, name), "__func__", getattr(cls, name))
        d[name] = (f.__name__, f.__qualname__.rsplit(".", 2)[-2:], f.__doc__)
    for name in cls._fields:
        d["field " + name] = (type(vars(cls)[name]), vars(cls)[name].__doc__)
    return {k: repr(v) for k, v in d.items()}


def test_the_classes_are_typing_namedtuple_s() -> None:
    for ours, theirs in zip(_pair(records.NamedTuple), _pair(typing.NamedTuple), strict=True):
        assert _describe(ours) == _describe(theirs)
        assert records.is_record(ours) and not records.is_record(theirs)


def test_the_records_behave_alike() -> None:
    (ours, _), (theirs, _) = _pair(records.NamedTuple), _pair(typing.NamedTuple)
    for cls in (ours, theirs):
        r = cls("a", tags=("x",))
        assert (r.name, r.count, r.tags, r.shout, r.twice()) == ("a", None, ("x",), "A", 0)
        assert repr(r) == "Rec(name='a', count=None, tags=('x',))"
        assert r._replace(count=2) == ("a", 2, ("x",)) and r._asdict() == {"name": "a", "count": None, "tags": ("x",)}
        assert cls._make(["b", 1, ()]) == ("b", 1, ())
        with pytest.raises(TypeError, match="Expected 3 arguments, got 1"):
            cls._make(["b"])
        with pytest.raises(ValueError, match="Got unexpected field names"):
            r._replace(nope=1)
        with pytest.raises(TypeError, match="missing 1 required positional argument: 'name'"):
            cls()
        with pytest.raises(AttributeError):
            r.name = "b"  # type: ignore[misc]
        with pytest.raises(AttributeError):
            r.other = 1  # no __dict__
        match r:
            case cls(name, count):  # __match_args__
                assert (name, count) == ("a", None)


def test_the_core_records_pickle_and_subclass() -> None:
    job = model.Job("gpu-1", 3600, command=("python", "x.py"))
    again = pickle.loads(pickle.dumps(job))  # noqa: S301  (our own bytes)
    assert again == job and type(again) is model.Job
    snap = model.CapacitySnapshot(unavailable=(model.LaneDown("gcp", "no project"),))
    assert pickle.loads(pickle.dumps(snap)) == snap  # noqa: S301

    class Sub(model.Job):
        @property
        def hours(self) -> float:
            return (self.duration_s or 0) / 3600

    assert Sub("gpu-1", 7200).hours == 2.0 and records.is_record(Sub)


def test_a_class_body_is_checked_as_typing_checks_it() -> None:
    for nt in (records.NamedTuple, typing.NamedTuple):
        with pytest.raises(TypeError, match="Non-default namedtuple field b cannot follow default field a"):

            class Bad(nt):  # type: ignore[misc, valid-type]
                a: int = 1
                b: int

        with pytest.raises(AttributeError, match="Cannot overwrite NamedTuple attribute _replace"):

            class Worse(nt):  # type: ignore[misc, valid-type]
                a: int

                def _replace(self) -> None: ...


def test_any_number_of_fields() -> None:
    for n in (0, 1, 2, 15, 24, 25, 40):
        names = [f"f{i}" for i in range(n)]
        body = {"__module__": __name__, "__qualname__": "R", "__annotations__": dict.fromkeys(names, int)}
        ours = records._RecordMeta("R", (records.NamedTuple,), body)
        theirs = typing.NamedTuple("R", [(name, int) for name in names])
        assert _describe(ours) == _describe(theirs)
        assert ours(*range(n)) == tuple(range(n)) and ours(**dict(zip(names, range(n), strict=True))) == tuple(range(n))
