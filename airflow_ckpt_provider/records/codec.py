"""One strict decoding for every value the provider persists or exchanges: the layer below
everything (standard library only; it imports nothing of this provider but the standard-library
helper :mod:`airflow_ckpt_provider.json_limits`), so the pure core, the upgrade record and the
driver side (``spark/``, in the user's Spark driver) decode through the same rules.

A value type declares a :class:`Codec`: its name, its own typed error, its format number and its
:class:`Field` s. :meth:`Codec.decode` takes the value's JSON text (or the object XCom gives
back) and, in this order:

1. parses text through :func:`load_json_text` (the size and depth limits of
   :mod:`airflow_ckpt_provider.json_limits`);
2. requires a JSON object;
3. checks the format number (the ``format`` key): present, an integer, and one this release
   reads; a newer one is refused, never guessed at;
4. refuses keys no field declares;
5. checks each field: present when required, of its declared JSON types, then decoded (a nested
   value by its own codec, an enum by value, ...); a derived field (one the writer computes from
   the others) is checked and left out.

Anything refused raises the value's own error (a :class:`TypedError`: the provider's
:class:`~airflow_ckpt_provider.checkpoint.errors.ProviderError` family derives from it) saying what
was found and what was expected; a field's decoder may raise ``ValueError``, ``TypeError``,
``KeyError`` or a nested value's own error and the codec turns it into that error (a nested error
that already is the value's error goes up unchanged: it keeps its own details). Text beyond the
limits raises the codec's ``too_large`` error when it has one (the core's
:class:`~airflow_ckpt_provider.checkpoint.errors.JsonTooLarge`), else the value's error.
:meth:`Codec.encode` writes the format number. :func:`array_of`, :func:`object_of` and
:class:`one_of` are the decoders of arrays, of objects of like values and of fixed words.

Strict is the default. The values written by older releases carry no format number and some are
read leniently (derived keys ignored, numbers accepted as text); their codecs say so explicitly
(``version=None``, ``unknown_keys="ignore"``, a field without ``types``) so that what they accept
does not change while they move here, and each leniency can be removed by one line when the
value gets a versioned format. A value an older release wrote as a bare JSON array (no object, so
no format number) names the field that array is read into (``bare_array``): it reads as format 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from airflow_ckpt_provider.json_limits import MAX_JSON_BYTES, MAX_JSON_DEPTH, json_limit_problem

__all__ = ["FORMAT_KEY", "UNVERSIONED", "Codec", "Field", "JsonLimitExceeded", "TypedError", "array_of",
           "json_type_name", "load_json_text", "object_of", "one_of"]

#: The key of a value's format number.
FORMAT_KEY = "format"
#: The format number of a value written before it had one (no ``format`` key): a codec whose
#: ``versions`` name it reads such a value as that first format; no writer writes it.
UNVERSIONED = 0
#: JSON types by the Python type :func:`json.loads` gives them.
_JSON_NAMES: dict[type, str] = {dict: "object", list: "array", str: "string", int: "integer", float: "number",
                                bool: "boolean", type(None): "null"}


class TypedError(Exception):
    """Base of the provider's typed errors: each says what was ``found``, what was ``expected`` and
    the ``action`` to take (keyword arguments; each class has a default action). The codec raises
    a value's own error of this family; the provider's
    :class:`~airflow_ckpt_provider.checkpoint.errors.ProviderError` derives from it (adding a
    summary, a path and a detail), so the codec recognises a nested value's refusal without
    importing the layers above it. Pickles with its fields."""

    default_action: ClassVar[str] = "Nothing was changed; fix the cause and retry."

    def __init__(self, *, found: str, expected: str, action: str | None = None) -> None:
        self.found = found
        self.expected = expected
        self.action = action if action is not None else self.default_action
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"found {self.found}; expected {self.expected}. {self.action}"

    def __reduce__(self) -> tuple[Any, ...]:  # keyword-only construction stays picklable
        return (_rebuild_typed, (type(self), dict(self.__dict__)))


def _rebuild_typed(cls: type[TypedError], state: dict[str, Any]) -> TypedError:
    error = cls.__new__(cls)
    error.__dict__.update(state)
    Exception.__init__(error, str(error))
    return error


class JsonLimitExceeded(ValueError):
    """Text beyond the size or depth limit of :mod:`airflow_ckpt_provider.json_limits` (``problem``
    says which), raised by :func:`load_json_text` before parsing."""

    def __init__(self, what: str, problem: str, max_bytes: int, max_depth: int) -> None:
        self.found = f"{what}: {problem}"
        self.expected = f"at most {max_bytes:,} bytes nested at most {max_depth} levels deep"
        super().__init__(self.found)


def _pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in items:
        if key in result:
            raise ValueError(f"duplicate key {key[:40]!r}")
        result[key] = value
    return result


def _constant(name: str) -> Any:  # noqa: ANN401 - never returns
    raise ValueError(f"non-standard JSON constant {name}")


def load_json_text(data: str | bytes, *, what: str = "JSON", strict: bool = False, max_bytes: int = MAX_JSON_BYTES,
                   max_depth: int = MAX_JSON_DEPTH) -> Any:  # noqa: ANN401 - any JSON value
    """Parse ``data`` within the limits: :class:`JsonLimitExceeded` beyond them (before parsing),
    ``ValueError`` (``json.JSONDecodeError``, ``UnicodeDecodeError``) when it is not JSON; ``strict``
    also refuses duplicate object keys and NaN/Infinity."""
    problem = json_limit_problem(data, max_bytes=max_bytes, max_depth=max_depth)
    if problem is not None:
        raise JsonLimitExceeded(what, problem, max_bytes, max_depth)
    try:
        if strict:
            return json.loads(data, object_pairs_hook=_pairs, parse_constant=_constant)
        return json.loads(data)
    except RecursionError:  # cannot happen within the depth limit; never a traceback if it does
        raise JsonLimitExceeded(what, "JSON too deeply nested to parse", max_bytes, max_depth) from None


def json_type_name(value: object) -> str:
    """The JSON name of ``value``'s type (``object``, ``array``, ``string``, ...), else the Python name."""
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _names(types: tuple[type, ...]) -> str:
    return " or ".join(sorted({_JSON_NAMES[t] for t in types}))


def _has_type(value: object, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # a JSON boolean is no number
        return bool in types
    if isinstance(value, int) and float in types:
        return True
    if isinstance(value, Mapping):
        return dict in types
    if isinstance(value, tuple):
        return list in types
    return isinstance(value, types)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class Field:
    """One key of a value's JSON object.

    ``types``: the JSON types accepted (``dict``, ``list``, ``str``, ``int``, ``float`` — an
    integer is a number —, ``bool``); None accepts any JSON value (a leniency of today's values);
    ``required``: refused when absent (else ``default``); ``nullable``: ``null`` accepted and
    decoded as None without ``decode``; ``decode``: turns the checked value into the field's value
    (None: kept as it is); ``expected``: what an error says the field takes (default: its JSON
    types); ``derived``: written by the value but computed from its other fields, so checked
    (types, ``decode``) and then left out of the decoded values."""

    types: tuple[type, ...] | None = None
    required: bool = True
    default: Any = None
    nullable: bool = False
    decode: Callable[[Any], Any] | None = None
    expected: str = ""
    derived: bool = False

    def expects(self) -> str:
        if self.expected:
            return self.expected
        if isinstance(self.decode, one_of):
            return self.decode.expected
        names = ["any JSON value"] if self.types is None else sorted({_JSON_NAMES[t] for t in self.types})
        return " or ".join(names + (["null"] if self.nullable and self.types is not None else []))


class Codec:
    """The decoding of one value type (see the module doc): ``what`` names the value in errors,
    ``error`` is its typed error, ``version`` the format number it writes and reads (None: a value
    of an older release, written without one), ``versions`` the older format numbers it still
    reads (:data:`UNVERSIONED`: the value as written before it had a format number, without the
    key), ``unknown_keys`` "refuse" or (a leniency) "ignore", ``too_large`` the error raised
    (instead of ``error``) for text beyond the size or depth limits (e.g. the typed
    :class:`~airflow_ckpt_provider.checkpoint.errors.JsonTooLarge`), ``strict_json`` also refuses
    text with duplicate keys or NaN/Infinity, ``bare_array`` names the field a bare JSON array is
    read into (the value as an older release wrote it: format :data:`UNVERSIONED`, which
    ``versions`` must name)."""

    def __init__(self, what: str, error: type[TypedError], fields: Mapping[str, Field], *,
                 version: int | None = 1, versions: tuple[int, ...] = (),
                 unknown_keys: Literal["refuse", "ignore"] = "refuse",
                 too_large: type[TypedError] | None = None, strict_json: bool = False,
                 bare_array: str | None = None) -> None:
        if FORMAT_KEY in fields:
            raise ValueError(f"{what}: {FORMAT_KEY!r} is the codec's own key, not a field")
        if version is not None and version <= UNVERSIONED:
            raise ValueError(f"{what}: format numbers start at {UNVERSIONED + 1}, not {version}")
        if unknown_keys not in ("refuse", "ignore"):
            raise ValueError(f"unknown_keys must be 'refuse' or 'ignore', not {unknown_keys!r}")
        if bare_array is not None and (bare_array not in fields or UNVERSIONED not in versions):
            raise ValueError(f"{what}: a bare array is read into one of its fields as format {UNVERSIONED}, "
                             f"not into {bare_array!r} with versions {versions}")
        self.what = what
        self.error = error
        self.fields = dict(fields)
        self.version = version
        self.versions = frozenset(versions) | ({version} if version is not None else set())
        self.unknown_keys = unknown_keys
        self.too_large = too_large
        self.strict_json = strict_json
        self.bare_array = bare_array

    def refuse(self, found: str, expected: str) -> TypedError:
        """The value's own error (to raise)."""
        return self.error(found=found, expected=expected)

    def parse(self, data: str | bytes | Mapping[str, Any]) -> Mapping[str, Any]:
        """Steps 1 and 2: the JSON object of ``data`` (a mapping is taken as it is; text of a bare
        array, with ``bare_array``, as the object holding it in that field)."""
        if isinstance(data, Mapping):
            return data
        if not isinstance(data, (str, bytes, bytearray)):
            raise self.refuse(f"{self.what} given as a {type(data).__name__}", f"{self.what} JSON text or object")
        try:
            raw = load_json_text(bytes(data) if isinstance(data, bytearray) else data, what=self.what,
                                 strict=self.strict_json)
        except JsonLimitExceeded as exc:
            if self.too_large is not None:
                raise self.too_large(found=exc.found, expected=exc.expected) from None
            raise self.refuse(exc.found, f"{self.what} as a JSON object") from None
        except ValueError as exc:  # not JSON, not UTF-8
            raise self.refuse(_reason(exc, f"{self.what} text that is not JSON ({exc})"),
                              f"{self.what} as a JSON object") from None
        if self.bare_array is not None and isinstance(raw, list):
            return {self.bare_array: raw}
        if not isinstance(raw, dict):
            raise self.refuse(f"{self.what} JSON {json_type_name(raw)}", f"{self.what} as a JSON object")
        return raw

    def check_format(self, raw: Mapping[str, Any]) -> None:
        """Step 3."""
        if self.version is None:
            if FORMAT_KEY in raw and self.unknown_keys == "refuse":
                raise self.refuse(f"{self.what} with a format number ({_short(raw[FORMAT_KEY])})",
                                  f"{self.what} as this release writes it (no format number): a newer release "
                                  "wrote it")
            return
        if FORMAT_KEY not in raw:
            if UNVERSIONED in self.versions:
                return  # written before the value had a format number: read as format 0
            raise self.refuse(f"{self.what} without a format number", f"{FORMAT_KEY} {self.version}")
        found = raw[FORMAT_KEY]
        if isinstance(found, bool) or not isinstance(found, int):
            raise self.refuse(f"{self.what} format {_short(found)}", f"an integer format number ({self.version})")
        if found not in self.versions or found == UNVERSIONED:
            newer = " (written by a newer release: upgrade the provider)" if found > self.version else ""
            raise self.refuse(f"{self.what} format {found}{newer}",
                              f"format {' or '.join(str(v) for v in sorted(self.versions - {UNVERSIONED}))}")

    def fields_of(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Steps 4 and 5 over a parsed object: each field's decoded value, by field name (derived
        fields checked, then left out)."""
        if self.unknown_keys == "refuse":
            unknown = sorted(str(k) for k in raw if k not in self.fields and k != FORMAT_KEY)
            if unknown:
                raise self.refuse(f"{self.what} with unknown key(s) {', '.join(map(repr, unknown[:10]))}",
                                  f"only {', '.join(self.fields)}")
        values: dict[str, Any] = {}
        for name, spec in self.fields.items():
            if name not in raw:
                if spec.required:
                    raise self.refuse(f"{self.what} without {name!r}", f"{name}: {spec.expects()}")
                if not spec.derived:
                    values[name] = spec.default
                continue
            value = raw[name]
            if value is None and spec.nullable:
                decoded = None
            elif spec.types is not None and not _has_type(value, spec.types):
                raise self.refuse(f"{self.what} {name!r} of JSON {json_type_name(value)} ({_short(value)})",
                                  f"{name}: {spec.expects()}")
            elif spec.decode is None:
                decoded = value
            else:
                try:
                    decoded = spec.decode(value)
                except self.error:
                    raise
                except (KeyError, TypeError, ValueError, TypedError) as exc:
                    raise self.refuse(f"{self.what} {name!r} = {_short(value)}, not valid ({_reason(exc)})",
                                      f"{name}: {spec.expects()}") from None
            if not spec.derived:
                values[name] = decoded
        return values

    def decode(self, data: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
        """All five steps: the decoded field values of ``data``, by field name."""
        raw = self.parse(data)
        self.check_format(raw)
        return self.fields_of(raw)

    def present(self, data: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
        """Like :meth:`decode`, but only the fields ``data`` holds (an absent optional field is left
        out, so the value type's own default applies: a dataclass's ``default_factory`` too)."""
        raw = self.parse(data)
        self.check_format(raw)
        return {name: value for name, value in self.fields_of(raw).items() if name in raw}

    def encode(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` (already JSON-able) with the format number, as :meth:`decode` reads them back."""
        unknown = sorted(set(values) - set(self.fields))
        if unknown:
            raise ValueError(f"{self.what}: no field(s) {', '.join(unknown)}")
        return dict(values) if self.version is None else {FORMAT_KEY: self.version, **values}


def array_of(*types: type, decode: Callable[[Any], Any] | None = None) -> Callable[[Any], tuple[Any, ...]]:
    """The decoder of a JSON array whose items are each of ``types`` (as :class:`Field` names
    them), then ``decode`` d (a nested value by its own codec): a tuple; ``TypeError`` naming the
    first item of another type."""
    def items(value: Any) -> tuple[Any, ...]:  # noqa: ANN401 - a checked JSON array
        for index, item in enumerate(value):
            if types and not _has_type(item, types):
                raise TypeError(f"item {index} of JSON {json_type_name(item)} ({_short(item)}), not {_names(types)}")
        return tuple(value) if decode is None else tuple(decode(item) for item in value)
    return items


def object_of(*types: type) -> Callable[[Any], dict[str, Any]]:
    """The decoder of a JSON object whose values are each of ``types`` (as :class:`Field` names
    them): a dict; ``TypeError`` naming the first value of another type."""
    def values(value: Any) -> dict[str, Any]:  # noqa: ANN401 - a checked JSON object
        for key, item in value.items():
            if not _has_type(item, types):
                raise TypeError(f"{_short(key)} of JSON {json_type_name(item)} ({_short(item)}), not {_names(types)}")
        return dict(value)
    return values


class one_of:  # noqa: N801 - used like the decoder function it is
    """The decoder of a text that must be one of ``words`` (then ``decode`` d, e.g. an enum);
    ``ValueError`` naming the words otherwise. A field decoded by it expects "one of" the words."""

    def __init__(self, *words: str, decode: Callable[[str], Any] | None = None) -> None:
        self.words = tuple(str(word) for word in words)
        self.decode = decode
        self.expected = f"one of {', '.join(self.words)}"

    def __call__(self, value: Any) -> Any:  # noqa: ANN401 - a checked JSON string
        if value not in self.words:
            raise ValueError(f"{_short(value)} is not {self.expected}")
        return value if self.decode is None else self.decode(value)


def _reason(exc: BaseException, otherwise: str = "") -> str:
    """What ``exc`` found: a provider error's own ``found``, else ``otherwise`` or its text."""
    found = getattr(exc, "found", None)
    if isinstance(found, str) and found:
        return found
    if otherwise:
        return otherwise
    if isinstance(exc, KeyError):
        return f"no {exc}"
    return str(exc) or type(exc).__name__
