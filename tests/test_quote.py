"""Input quoted in error messages: one line, about 200 characters at most, whatever the value."""

from __future__ import annotations

from esnfed_core.quote import LIMIT, brief, failure, quote, quote_shape


def test_short_values_are_plain_reprs():
    assert quote("S2") == "'S2'" and quote(b"\x00a") == "b'\\x00a'" and quote(-2.5) == "-2.5"
    assert brief(ValueError("bad value")) == "bad value" and brief(KeyError()) == "KeyError"
    assert failure(KeyError("users")) == "missing key 'users'" and failure(TypeError("no len")) == "no len"


def test_containers_read_as_plain_text_not_python_reprs():
    assert quote(("walk", "walk")) == "['walk', 'walk']" and quote([1, -2]) == "[1, -2]"
    assert quote({"b", "a"}) == "['a', 'b']" and quote({"a": 1, "b": [2], 3: "x"}) == "{a: 1, b: [2], 3: 'x'}"
    assert quote([]) == "an empty list" and quote(()) == "an empty list" and quote({}) == "an empty mapping"
    assert quote(list(range(1000))).endswith(", ...(1000 items)]")
    assert quote_shape((3, 4)) == "(3, 4)" and quote_shape((5,)) == "(5,)" and quote_shape(()) == "()"
    assert quote_shape([3]) == "[3]"  # not a tuple: a broken header's value, said as it is


def test_long_values_are_cut_and_say_how_long_they_were():
    for value in ("x" * 10**6, b"\n" * 10**6, ["y" * 1000] * 1000, {i: i for i in range(10**4)}, 10**100_000,
                  (2**5000, 3)):
        text = quote(value)
        assert "\n" not in text and len(text) <= LIMIT + 40, (type(value), len(text))
    assert quote("x" * 1000).endswith("...(1000 in all)")
    assert quote(10**100_000).startswith("<int of ")


def test_brief_keeps_the_first_line_cut_short():
    assert brief(ValueError("first\nsecond")) == "first"
    text = brief(ValueError("z" * 10**6))
    assert text.startswith("z" * LIMIT) and text.endswith(f"...({10**6} characters)")
    assert brief("a\rb") == "a\\rb"
