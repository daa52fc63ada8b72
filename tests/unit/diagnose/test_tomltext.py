"""TOML strings lbtune writes into profile lines: read back by a real TOML parser."""

from __future__ import annotations

import random

import pytest
import tomllib

from lbtune.diagnose import tomltext

# every character class the escaping treats apart, and some it leaves alone
CHARS = [chr(c) for c in range(0x00, 0x90)] + ["é", "\u2028", "\U0001f600", "ß", "\\", '"']


@pytest.mark.parametrize(
    "text, written",
    [
        ("eth0", '"eth0"'),
        ("", '""'),
        ('a "b"', '"a \\"b\\""'),
        ("c:\\x", '"c:\\\\x"'),
        ("tab\there", '"tab\\u0009here"'),
        ("nl\n", '"nl\\u000A"'),
        ("del\x7f", '"del\\u007F"'),
        ("fe80::1%eth0", '"fe80::1%eth0"'),
    ],
)
def test_strings_are_escaped_as_toml_basic_strings(text, written):
    assert tomltext.string(text) == written


def test_any_text_reads_back_the_same_through_tomllib():
    rng = random.Random(33)  # noqa: S311 (test data)
    for _ in range(5000):
        text = "".join(rng.choice(CHARS) for _ in range(rng.randrange(0, 16)))
        line = f"k = {tomltext.string(text)}"
        assert tomllib.loads(line) == {"k": text}, line
