"""The plain-TOML reader: whatever document it returns is tomllib's for the same text; it
declines (None) everything else, and it does read the generated configs it exists for."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lbtune.ipvs import plaintoml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _tomllib(text: str) -> object:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return "error"


def _agrees(text: str) -> None:
    fast = plaintoml.loads(text)
    if fast is not None:
        assert fast == _tomllib(text), text


names = st.sampled_from(["service", "real_server", "director", "vip", "sysctl", "port", "a-b",
                         "x_1", "true", "0"])
strings = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
                  max_size=6)
values = st.one_of(
    strings.map(lambda s: '"' + s + '"'),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["true", "false", "[]", '["a", "b",]', '[ "x" ]', "1.5", "+1", "01",
                     "'lit'", '"a\\"b"', '"""m"""', "1_000", "0x10", "inf", "{a = 1}",
                     '["a" "b"]', "[1, 2]", "nan", '"tab\there"', "-0"]),
)
lines = st.one_of(
    st.tuples(names, st.sampled_from([" = ", "=", "\t=  "]), values,
              st.sampled_from(["", " # c", "#", "  "])).map("".join),
    names.map(lambda n: f"[{n}]"),
    names.map(lambda n: f"[[{n}]]"),
    st.tuples(names, names).map(lambda t: f"[[{t[0]}.{t[1]}]]"),
    st.tuples(names, names).map(lambda t: f"[{t[0]}.{t[1]}]"),
    st.sampled_from(["", "  ", "# comment", "  # x = 1", "[[ service ]]", "a.b = 1",
                     '"q" = 1', "x = ", "= 1", "[x", "[[service]] x", "\r", "\x00", "\x7f",
                     "\ufeff", "x = 1 2", "[service.real_server]"]),
    strings,
)
documents = st.lists(lines, max_size=14).map("\n".join)


@settings(max_examples=500, deadline=None)
@given(documents)
def test_a_document_it_reads_is_the_one_tomllib_reads(text):
    _agrees(text)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(['[[service]]', 'address = "10.0.0.1"', "port = 80",
                                 "[[service.real_server]]", "weight = 3", '[director]',
                                 "drain_timeout = 0", '[[vip]]', 'flags = ["sh-port"]',
                                 "", "# note"]), max_size=30).map("\n".join))
def test_config_shaped_documents_agree(text):
    _agrees(text)


def test_generated_configs_take_the_fast_path():
    parts = ["[director]\ndrain_timeout = 0\n"]
    for port in range(1000, 1200):  # as bench/ipvs.py writes them
        parts.append(f'[[service]]\naddress = "10.200.0.1"\nport = {port}\nscheduler = "wrr"\n')
        for r in range(3):
            parts.append(f'[[service.real_server]]\naddress = "10.201.{r}.{port % 250}"\n'
                         f"weight = {r + 1}\n")
    text = "".join(parts)
    doc = plaintoml.loads(text)
    assert doc is not None
    assert doc == tomllib.loads(text)
    assert len(doc["service"]) == 200 and len(doc["service"][0]["real_server"]) == 3


@pytest.mark.parametrize("text", [
    'a = 1\na = 2',  # a redefinition: tomllib words the error
    '[d]\n[d]',
    '[[s]]\n[s]',
    'x = 1\n[x]',
    '[[s]]\nr = 1\n[[s.r]]',
    '[[s.r]]',  # no [[s]] to hang it on
    'a = "x\\ty"',  # an escape
    "a = 1.5",
    "a.b = 1",
    "a = 1\r\nb = 2",
])
def test_declines_what_it_does_not_read(text):
    assert plaintoml.loads(text) is None
