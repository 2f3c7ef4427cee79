"""The RunPod REST v2 OpenAPI document (vendored beside this file) as the test suite uses it:
schema validators, operation look-up, query parameters read the document's way, and the
check that an answer is one the document allows.

The document is OpenAPI 3.1, so its schemas are JSON Schema 2020-12; every validator is a
``$ref`` into the whole document (registered as ``urn:runpod-v2``), so references inside
resolve as they do in the document.

:func:`answer_violations` is what "the fake answers as the document says" means here:

- a documented path and method: the status is one the operation lists (or its
  ``default``); the ``Content-Type`` is one the response lists; the body validates
  against that media type's schema; a response without content has no body; every
  documented header that is present validates against its schema;
- every error (4xx/5xx) is ``application/problem+json`` with an ``ErrorResponse`` body;
- 429 carries ``Retry-After`` (integer seconds) and 405 carries ``Allow`` (RFC 9110),
  listing exactly the methods the document gives the path;
- a path the document does not have is a 404 problem; ``OPTIONS`` is 204 with ``Allow``;
  ``HEAD`` has no body.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from jsonschema import Draft202012Validator, ValidationError, validators
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

DOCUMENT = Path(__file__).with_name("runpod-openapi-v2.json")
URN = "urn:runpod-v2"
_ERROR = {"$ref": "#/components/schemas/ErrorResponse"}
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
PROBLEM = "application/problem+json"


@cache
def document() -> dict[str, Any]:
    return json.loads(DOCUMENT.read_text(encoding="utf-8"))


@cache
def _registry() -> Registry:
    return Registry().with_resource(URN, Resource(contents=document(), specification=DRAFT202012))


# --- patterns, read as ECMA-262 (what JSON Schema says a pattern is) ---------------------------
#
# Python's ``re`` reads ``\s``, ``\d``, ``\w``, ``.`` and ``$`` differently: its ``\s`` takes U+0085,
# its ``\d`` every Unicode digit, its ``$`` matches before a final newline.  The contract run
# found the first (an SSH key ending in U+0085 is valid by the document, and was refused).

_ECMA_SPACE = "\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_ECMA_CLASSES = {"d": "0-9", "w": "A-Za-z0-9_", "s": _ECMA_SPACE}


@cache
def ecma(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled so Python matches what an ECMA-262 engine (no flags) matches."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt.lower() in _ECMA_CLASSES:
                chars = _ECMA_CLASSES[nxt.lower()]
                if in_class and nxt.islower():
                    out.append(chars)
                elif in_class:  # a negated shorthand inside a class: rare, and not in the document
                    raise ValueError(f"unsupported ECMA pattern {pattern!r}")
                else:
                    out.append(f"[{'^' if nxt.isupper() else ''}{chars}]")
            else:
                out.append(ch + nxt)
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "]":  # ``[]`` / ``[^]`` are empty / any in ECMA
                raise ValueError(f"unsupported ECMA pattern {pattern!r}")
        elif ch == "$":
            ch = r"\Z"
        elif ch == ".":
            ch = "[^\n\r\u2028\u2029]"
        out.append(ch)
        i += 1
    return re.compile("".join(out), re.ASCII)


def _ecma_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and not ecma(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = validators.extend(Draft202012Validator, {"pattern": _ecma_pattern})


@cache
def validator(pointer: str) -> Any:
    """A validator for the schema at JSON pointer ``pointer`` (``/components/schemas/Pod``)."""
    return _Validator(
        {"$ref": f"{URN}#{pointer}"}, registry=_registry(), format_checker=Draft202012Validator.FORMAT_CHECKER
    )


def schema_validator(name: str) -> Any:
    """The validator for ``#/components/schemas/<name>``."""
    return validator(f"/components/schemas/{name}")


def request_errors(name: str, body: Any) -> list[str]:
    """Each way ``body`` breaks ``#/components/schemas/<name>``, one line each, in the
    document's style: ``$.cpu.vcpuCount: ...``; an undeclared member reads as the document's
    example does, ``$: additional properties 'bogus' not allowed``."""
    lines = []
    for error in sorted(schema_validator(name).iter_errors(body), key=lambda e: list(map(str, e.absolute_path))):
        where = "$" + "".join(f".{p}" for p in error.absolute_path)
        if error.validator == "unevaluatedProperties" and isinstance(error.instance, dict):
            extra = [k for k in error.instance if k not in _declared(error.schema)]
            if extra:  # jsonschema also lists members whose own subschema failed; those are reported there
                lines.append(f"{where}: additional properties {', '.join(repr(k) for k in extra)} not allowed")
            continue
        lines.append(f"{where}: {error.message}")
    return lines


def _declared(schema: dict[str, Any]) -> set[str]:
    """Property names a schema declares, through ``allOf`` and ``$ref``."""
    _, schema = _follow("", schema)
    names = set(schema.get("properties") or {})
    for part in schema.get("allOf") or []:
        names |= _declared(part)
    return names


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def _follow(pointer: str, node: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Follow ``$ref`` chains: the pointer and node the document really means."""
    while "$ref" in node:
        pointer = node["$ref"].removeprefix("#")
        node = document()
        for part in pointer.strip("/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
    return pointer, node


# --- operations ------------------------------------------------------------------------------


@cache
def _templates() -> tuple[tuple[str, re.Pattern[str]], ...]:
    # Literal segments beat parameters: /v2/registries/delegations before /v2/registries/{id}.
    paths = sorted(document()["paths"], key=lambda p: (p.count("/"), p.count("{"), p))
    return tuple((p, re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(p)))) for p in paths)


def path_template(path: str) -> str | None:
    """The document's path (``/v2/pods/{id}``) that ``path`` (no query) is an instance of."""
    path = urlsplit(path).path
    candidates = [t for t, pattern in _templates() if pattern.fullmatch(path)]
    candidates.sort(key=lambda t: t.count("{"))
    return candidates[0] if candidates else None


def allowed(template: str) -> list[str]:
    """The methods the document gives ``template``, upper case, in the document's order."""
    item = document()["paths"][template]
    return [m.upper() for m in item if m in METHODS]


def operation(method: str, template: str) -> dict[str, Any] | None:
    return document()["paths"][template].get(method.lower())


def _parameters(method: str, template: str) -> list[tuple[str, dict[str, Any]]]:
    item = document()["paths"][template]
    base = f"/paths/{_escape(template)}"
    found: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    own = (item.get(method.lower()) or {}).get("parameters") or []
    for where, params in ((base, item.get("parameters") or []), (f"{base}/{method.lower()}", own)):
        for index, param in enumerate(params):
            pointer, resolved = _follow(f"{where}/parameters/{index}", param)
            found[(resolved["in"], resolved["name"])] = (pointer, resolved)
    return list(found.values())


def query_values(method: str, template: str, raw_query: str) -> tuple[dict[str, Any], list[str]]:
    """The documented query parameters of a request, typed as the document declares them
    (``form`` arrays split on commas), and each violation of their schemas."""
    given: dict[str, list[str]] = {}
    for name, value in parse_qsl(raw_query, keep_blank_values=True):
        given.setdefault(name, []).append(value)
    values: dict[str, Any] = {}
    errors: list[str] = []
    for pointer, param in _parameters(method, template):
        if param["in"] != "query" or param["name"] not in given:
            continue
        name = param["name"]
        raw = given[name][-1]
        schema = _follow(f"{pointer}/schema", param["schema"])[1]
        value = _typed(raw, schema, explode=param.get("explode", param.get("style", "form") == "form"))
        for error in validator(f"{pointer}/schema").iter_errors(value):
            errors.append(f"query.{name}: {error.message}")
        values[name] = value
    return values, errors


def _typed(raw: str, schema: dict[str, Any], *, explode: bool) -> Any:
    kind = schema.get("type")
    if kind == "array":
        item = _follow("", schema.get("items") or {})[1]
        parts = raw.split(",") if raw else []
        return [_typed(p, item, explode=explode) for p in parts]
    if kind == "integer":
        return int(raw) if re.fullmatch(r"-?\d+", raw) else raw
    if kind == "number":
        try:
            return float(raw)
        except ValueError:
            return raw
    if kind == "boolean":
        return {"true": True, "false": False}.get(raw, raw)
    return raw


# --- answers ---------------------------------------------------------------------------------


def _media_type(headers: dict[str, str]) -> str | None:
    value = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
    return value.split(";", 1)[0].strip().lower() if value else None


def _header(headers: dict[str, str], name: str) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == name.lower()), None)


def _check_body(pointer: str, response: dict[str, Any], headers: dict[str, str], body: bytes) -> list[str]:
    content = response.get("content")
    if not content:
        return [f"no body documented, {len(body)} bytes sent"] if body else []
    media = _media_type(headers)
    if media not in content:
        return [f"Content-Type {media!r} is not one of {sorted(content)}"]
    try:
        data = json.loads(body)
    except ValueError:
        return ["body is not JSON"]
    schema_pointer = f"{pointer}/content/{_escape(media)}/schema"
    schema_pointer, _ = _follow(schema_pointer, content[media]["schema"])
    return [f"body{_where(e)}: {e.message}" for e in validator(schema_pointer).iter_errors(data)]


def _where(error: Any) -> str:
    return "".join(f"[{p!r}]" for p in error.absolute_path)


def _check_headers(pointer: str, response: dict[str, Any], headers: dict[str, str]) -> list[str]:
    found = []
    for name, spec in (response.get("headers") or {}).items():
        value = _header(headers, name)
        if value is None:
            continue
        header_pointer, resolved = _follow(f"{pointer}/headers/{_escape(name)}", spec)
        schema = _follow("", resolved["schema"])[1]
        typed = _typed(value, schema, explode=False)
        for error in validator(f"{header_pointer}/schema").iter_errors(typed):
            found.append(f"header {name}: {error.message}")
    return found


def _component(name: str) -> tuple[str, dict[str, Any]]:
    return _follow("", {"$ref": f"#/components/responses/{name}"})


def answer_violations(method: str, path: str, status: int, headers: dict[str, str], body: bytes) -> list[str]:
    """Each way this answer breaks the document (empty: it is one the document allows)."""
    method = method.upper()
    found: list[str] = []
    template = path_template(path)
    if method == "HEAD":  # headers only: whatever the status, no body
        return [f"HEAD answered with {len(body)} body bytes"] if body else []
    if not method:  # the request line itself was malformed: any error, as a problem document
        if status < 400:
            return [f"a malformed request answered {status}"]
        return _check_body("/components/schemas", {"content": {PROBLEM: {"schema": _ERROR}}}, headers, body)
    if status == 429 and not re.fullmatch(r"\d+", _header(headers, "Retry-After") or ""):
        found.append("429 without an integer Retry-After")
    if status >= 400 and method != "HEAD" and _media_type(headers) != PROBLEM:
        found.append(f"error {status} is {_media_type(headers)!r}, not {PROBLEM}")
    if template is None:
        if status in (401, 429):
            pointer, response = _component("UnauthorizedError" if status == 401 else "TooManyRequestsError")
        elif status == 404:
            pointer, response = _component("NotFoundError")
        else:
            return [*found, f"{method} {path}: the document has no such path, yet {status} (not 404)"]
        return found + _check_body(pointer, response, headers, body)
    documented = allowed(template)
    if method == "OPTIONS" and "OPTIONS" not in documented:
        if status != 204 or _header(headers, "Allow") is None or body:
            found.append(f"OPTIONS {template}: {status} (expected 204 with Allow and no body)")
        return found
    op = operation(method, template)
    if op is None:
        allow = _header(headers, "Allow")
        if status == 401:
            pointer, response = _component("UnauthorizedError")
            return found + _check_body(pointer, response, headers, body)
        if status != 405:
            found.append(f"{method} {template} is not documented, yet {status} (not 405)")
        elif allow is None or [m.strip() for m in allow.split(",")] != documented:
            found.append(f"405 Allow {allow!r} is not {', '.join(documented)!r}")
        pointer, response = _component("MethodNotAllowedError")
        return found + _check_body(pointer, response, headers, body)
    responses = op["responses"]
    base = f"/paths/{_escape(template)}/{method.lower()}/responses"
    key = str(status) if str(status) in responses else "default"
    if key == "default" and status < 400:
        found.append(f"{method} {template}: {status} is not a documented answer")
    pointer, response = _follow(f"{base}/{key}", responses[key])
    return found + _check_headers(pointer, response, headers) + _check_body(pointer, response, headers, body)
