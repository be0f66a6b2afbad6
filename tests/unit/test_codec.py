"""The strict codec (airflow_ckpt_provider.records.codec) as decision tables: each step of the
decoding (parse, object, format number, unknown keys, fields) refuses with the value's own typed
error, saying what was found and what was expected; round trips of encode and decode."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_ckpt_provider.checkpoint.errors import CheckpointError, InvalidVerdict, JsonTooLarge
from airflow_ckpt_provider.json_limits import MAX_JSON_DEPTH
from airflow_ckpt_provider.records.codec import (
    FORMAT_KEY,
    UNVERSIONED,
    Codec,
    Field,
    array_of,
    json_type_name,
    one_of,
)


class SampleError(CheckpointError, ValueError):
    summary = "invalid sample"


class Colour:
    """A field value decoded from text."""

    def __init__(self, name: str) -> None:
        if name not in ("red", "green"):
            raise ValueError(f"no colour {name!r}")
        self.name = name


SAMPLE = Codec("Sample", SampleError, {
    "name": Field((str,)),
    "count": Field((int,), required=False, default=0),
    "ratio": Field((float,), required=False, nullable=True),
    "tags": Field((list,), required=False, default=()),
    "inner": Field((dict,), required=False, nullable=True),
    "colour": Field((str,), required=False, decode=Colour),
    "flag": Field((bool,), required=False, default=False),
}, version=2, versions=(1,))


def doc(**fields: Any) -> str:  # noqa: ANN401
    return json.dumps({FORMAT_KEY: 2, "name": "n", **fields})


OK: list[tuple[str, Any, dict[str, Any]]] = [
    ("the minimum", doc(), {"name": "n", "count": 0, "ratio": None, "tags": (), "flag": False}),
    ("bytes", doc().encode(), {"name": "n"}),
    ("an object, as XCom gives it", {FORMAT_KEY: 2, "name": "n"}, {"name": "n"}),
    ("an older format it still reads", json.dumps({FORMAT_KEY: 1, "name": "n"}), {"name": "n"}),
    ("an integer where a number goes", doc(ratio=2), {"ratio": 2}),
    ("null where nullable", doc(ratio=None, inner=None), {"ratio": None, "inner": None}),
    ("every field", doc(count=3, ratio=0.5, tags=["a"], inner={"x": 1}, flag=True),
     {"count": 3, "ratio": 0.5, "tags": ["a"], "inner": {"x": 1}, "flag": True}),
]

REFUSED: list[tuple[str, Any, type[Exception], str]] = [
    ("not JSON", "{nope", SampleError, "not JSON"),
    ("not UTF-8", b"\xff\xfe", SampleError, "not JSON"),
    ("duplicate-free but not an object", "[1, 2]", SampleError, "Sample JSON array"),
    ("a JSON string", '"x"', SampleError, "Sample JSON string"),
    ("null", "null", SampleError, "Sample JSON null"),
    ("a number given", 5, SampleError, "given as a int"),
    ("nested past the depth limit", "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), SampleError,
     "levels deep"),
    ("no format number", json.dumps({"name": "n"}), SampleError, "without a format number"),
    ("a format number as text", json.dumps({FORMAT_KEY: "2", "name": "n"}), SampleError, "format '2'"),
    ("a format number of true", json.dumps({FORMAT_KEY: True, "name": "n"}), SampleError, "format True"),
    ("a newer format", json.dumps({FORMAT_KEY: 3, "name": "n"}), SampleError, "newer release"),
    ("a format never written", json.dumps({FORMAT_KEY: 0, "name": "n"}), SampleError, "format 0"),
    ("an unknown key", doc(colour_name="red"), SampleError, "unknown key(s) 'colour_name'"),
    ("a required field absent", json.dumps({FORMAT_KEY: 2}), SampleError, "without 'name'"),
    ("a required field null", doc(name=None), SampleError, "'name' of JSON null"),
    ("text where an integer goes", doc(count="3"), SampleError, "'count' of JSON string"),
    ("a number where an integer goes", doc(count=1.5), SampleError, "'count' of JSON number"),
    ("a boolean where an integer goes", doc(count=True), SampleError, "'count' of JSON boolean"),
    ("an integer where a boolean goes", doc(flag=1), SampleError, "'flag' of JSON integer"),
    ("an object where a list goes", doc(tags={}), SampleError, "'tags' of JSON object"),
    ("null where not nullable", doc(count=None), SampleError, "'count' of JSON null"),
    ("a value its decoder refuses", doc(colour="blue"), SampleError, "no colour 'blue'"),
]


@pytest.mark.parametrize(("case", "given", "expected"), OK, ids=[row[0] for row in OK])
def test_accepted(case: str, given: Any, expected: dict[str, Any]) -> None:  # noqa: ANN401
    values = SAMPLE.decode(given)
    assert set(values) == set(SAMPLE.fields)
    assert {k: values[k] for k in expected} == expected


@pytest.mark.parametrize(("case", "given", "kind", "mention"), REFUSED, ids=[row[0] for row in REFUSED])
def test_refused_with_the_values_own_error(case: str, given: Any, kind: type[Exception],  # noqa: ANN401
                                           mention: str) -> None:
    with pytest.raises(Exception) as refused:  # noqa: PT011 - the exact type is checked below
        SAMPLE.decode(given)
    error = refused.value
    assert type(error) is kind, f"{type(error).__name__}: {error}"
    assert isinstance(error, CheckpointError) and error.found and error.expected
    assert mention in error.found, error.found
    assert f"found {error.found}" in str(error) or "characters cut" in str(error)


def test_a_decoded_colour_is_the_decoders_value() -> None:
    colour = SAMPLE.decode(doc(colour="red"))["colour"]
    assert isinstance(colour, Colour) and colour.name == "red"


def test_errors_of_parsing_it_is_told_to_keep_go_up_unchanged() -> None:
    keeping = Codec("Kept", SampleError, {"a": Field()}, version=None, too_large=JsonTooLarge)
    with pytest.raises(JsonTooLarge):
        keeping.decode("[" * (MAX_JSON_DEPTH + 1))
    with pytest.raises(SampleError):
        keeping.decode("{")


@pytest.mark.parametrize(("given", "accepted"), [
    ({"a": 1}, True),
    ({"a": 1, "b": 2}, False),
    ({"a": 1, FORMAT_KEY: 1}, False),  # a newer release's value is not read as today's
])
def test_an_unversioned_value_of_todays_release(given: dict[str, Any], accepted: bool) -> None:
    today = Codec("Today", SampleError, {"a": Field((int,))}, version=None)
    if accepted:
        assert today.decode(given) == {"a": 1}
    else:
        with pytest.raises(SampleError):
            today.decode(given)


def test_the_leniency_of_todays_values_is_explicit() -> None:
    lenient = Codec("Lenient", InvalidVerdict, {"a": Field()}, version=None, unknown_keys="ignore")
    assert lenient.decode({"a": [1], "derived": "x", FORMAT_KEY: 9}) == {"a": [1]}


def test_a_codec_is_declared_correctly() -> None:
    with pytest.raises(ValueError, match="codec's own key"):
        Codec("Bad", SampleError, {FORMAT_KEY: Field()})
    with pytest.raises(ValueError, match="unknown_keys"):
        Codec("Bad", SampleError, {}, unknown_keys="warn")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no field"):
        SAMPLE.encode({"nope": 1})


@pytest.mark.parametrize(("value", "name"), [({}, "object"), ([], "array"), ((), "array"), ("", "string"),
                                             (1, "integer"), (1.0, "number"), (True, "boolean"), (None, "null")])
def test_json_type_names(value: object, name: str) -> None:
    assert json_type_name(value) == name


samples = st.fixed_dictionaries(
    {"name": st.text(max_size=20)},
    optional={"count": st.integers(-10**12, 10**12), "ratio": st.none() | st.floats(allow_nan=False,
                                                                                      allow_infinity=False),
              "tags": st.lists(st.text(max_size=5), max_size=3), "inner": st.none() | st.dictionaries(
                  st.text(max_size=5), st.integers(), max_size=3), "flag": st.booleans()})


@settings(max_examples=100, deadline=None)
@given(samples)
def test_encode_then_decode_round_trips(values: dict[str, Any]) -> None:
    encoded = SAMPLE.encode(values)
    assert encoded[FORMAT_KEY] == 2
    for given_ in (encoded, json.dumps(encoded)):
        decoded = SAMPLE.decode(given_)
        assert {k: decoded[k] for k in values} == values


class OtherError(CheckpointError, ValueError):
    summary = "invalid other sample"


INNER = Codec("Inner", SampleError, {"n": Field((int,))}, version=None)
OUTER = Codec("Outer", OtherError, {
    "inners": Field((list,), decode=array_of(dict, decode=INNER.decode)),
    "kind": Field((str,), required=False, decode=one_of("a", "b")),
    "total": Field((int,), required=False, derived=True),
}, version=None)


@pytest.mark.parametrize(("given", "found"), [
    ({"inners": [{"n": "1"}]}, "Outer 'inners' = [{'n': '1'}], not valid (Inner 'n' of JSON string"),
    ({"inners": [5]}, "item 0 of JSON integer (5), not object"),
    ({"inners": [], "kind": "c"}, "'c' is not one of a, b"),
    ({"inners": [], "total": "3"}, "'total' of JSON string"),
])
def test_nested_values_and_words_are_refused_with_the_outer_values_error(given: dict[str, Any], found: str) -> None:
    with pytest.raises(OtherError) as refused:
        OUTER.decode(given)
    assert found in refused.value.found, refused.value.found


def test_a_nested_error_that_is_the_values_own_goes_up_as_it_is() -> None:
    same = Codec("Same", SampleError, {"inner": Field((dict,), decode=INNER.decode)}, version=None)
    with pytest.raises(SampleError) as refused:
        same.decode({"inner": {"n": True}})
    assert refused.value.found.startswith("Inner 'n' of JSON boolean")


def test_a_derived_field_is_checked_then_left_out() -> None:
    assert OUTER.decode({"inners": [{"n": 1}], "total": 1, "kind": "a"}) == {"inners": ({"n": 1},), "kind": "a"}
    assert "total" not in OUTER.decode({"inners": []})
    assert OUTER.fields["kind"].expects() == "one of a, b"


def test_strict_json_refuses_duplicate_keys_and_nan() -> None:
    lenient = Codec("Lenient", SampleError, {"a": Field((float,))}, version=None)
    strict = Codec("Strict", SampleError, {"a": Field((float,))}, version=None, strict_json=True)
    assert lenient.decode('{"a": 1, "a": 2}') == {"a": 2}
    for text in ('{"a": 1, "a": 2}', '{"a": NaN}'):
        with pytest.raises(SampleError, match="not JSON"):
            strict.decode(text)


def test_a_bare_array_of_an_older_release_reads_as_format_0_only_where_the_codec_names_its_field() -> None:
    listed = Codec("Listed", SampleError, {"items": Field((list,), decode=array_of(int))}, versions=(UNVERSIONED,),
                   bare_array="items")
    assert listed.decode("[1, 2]") == listed.decode('{"items": [1, 2]}') == listed.decode(b'{"format": 1, "items": [1, 2]}')
    assert listed.decode("[1, 2]") == {"items": (1, 2)}
    with pytest.raises(SampleError, match="'items' = \\[1, 'x'\\], not valid"):
        listed.decode('[1, "x"]')
    with pytest.raises(SampleError, match="Listed JSON array"):  # a codec without it refuses an array
        Codec("Listed", SampleError, {"items": Field((list,))}, versions=(UNVERSIONED,)).decode("[1]")
    with pytest.raises(SampleError, match="Listed JSON string"):
        listed.decode('"x"')
    for bad in ({"bare_array": "nope", "versions": (UNVERSIONED,)}, {"bare_array": "items"}):
        with pytest.raises(ValueError, match="a bare array"):
            Codec("Bad", SampleError, {"items": Field((list,))}, **bad)  # type: ignore[arg-type]
