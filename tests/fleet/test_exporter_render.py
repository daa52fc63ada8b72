"""The exporter's own text writer against prometheus_client's generate_latest: byte for byte
on the families a real collection makes (the 48-CPU fixture, this host) and on hostile ones
(quotes, backslashes and newlines in label values and help, labels out of name order, empty
families, infinities, NaN, large and negative values), and names the client would escape go
through the client."""

from __future__ import annotations

import math

import pytest

from lbtune.exporter.collect import Exporter, _render_with_client, render
from lbtune.exporter.series import Family
from lbtune.host.runtime import Runtime
from tests.conftest import DELL, HOSTS


def families(root: str) -> list[Family]:
    exp = Exporter(Runtime(root=root), min_interval=0)
    seen: list[Family] = []
    import lbtune.exporter.collect as collect

    real = collect.render

    def spy(fams):  # type: ignore[no-untyped-def]
        seen.extend(fams)
        return real(fams)

    collect.render = spy
    try:
        exp.scrape()
    finally:
        collect.render = real
        exp.close()
    return seen


@pytest.mark.parametrize("root", [str(HOSTS / DELL), "/"], ids=["fixture-48-cpus", "this-host"])
def test_a_real_collection_renders_as_the_client_does(root: str) -> None:
    fams = families(root)
    assert len(fams) >= 10 and sum(len(f.samples) for f in fams) >= 20
    assert render(fams) == _render_with_client(fams)


HOSTILE = [
    Family("lbtune_x_total", "counter", 'help with \\ and "quotes"\nand a newline', ("b", "a"),
           ((('v"1', "back\\slash"), 1.0), (("new\nline", "ü∞"), 2.5e20), (("", ""), 0))),
    Family("lbtune_gauge", "gauge", "g", (), (((), math.inf), ((), -math.inf), ((), math.nan))),
    Family("lbtune_empty", "gauge", "no samples", ("a",), ()),
    Family("lbtune_numbers", "gauge", "n", ("k",),
           ((("1",), 123456789.0), (("2",), -7), (("3",), 1e-9), (("4",), 12345678901234.0),
            (("5",), 0.1), (("6",), 2**53))),
]


def test_hostile_families_render_as_the_client_does() -> None:
    assert render(HOSTILE) == _render_with_client(HOSTILE)


def test_names_the_client_would_escape_go_through_it() -> None:
    odd = [Family("lbtune.dotted", "gauge", "h", ("la-bel",), ((("x",), 1.0),))]
    assert render(odd) == _render_with_client(odd)
    assert b"lbtune_dotted" in render(odd)  # the client's escaping, not a raw dot


def test_zeros_and_repeated_values_render_as_the_client_does() -> None:
    # render() writes zero itself and each other value once per collection: 0.0 and -0.0
    # are one dict key with two texts, 1 and 1.0 and True one value with one text.
    values = [0.0, -0.0, 0, False, 1.0, 1, True, 1.0, -0.0, 0.0, 2.5e20, 2.5e20, math.nan,
              math.nan, 1e-9, -7, -7.0, 123456789.0, 123456789]  # fmt: skip
    fams = [Family("lbtune_v_total", "counter", "v", ("n",),
                   tuple(((str(i),), v) for i, v in enumerate(values))),
            Family("lbtune_w", "gauge", "w", ("b", "a"),
                   tuple(((str(i), "x"), v) for i, v in enumerate(reversed(values))))]  # fmt: skip
    assert render(fams) == _render_with_client(fams)
