"""A fix's layout is kept for the next equal fix (the monitor lays out the same fixes every
second), never for one whose values are equal but of another type, and a fix whose values
cannot be hashed is laid out anyway."""

from __future__ import annotations

from lbtune.diagnose import view
from lbtune.diagnose.finding import Fix, ProfileSetting


def _fix(value: object) -> Fix:
    setting = ProfileSetting(("sysctl",), "net.ipv4.tcp_syncookies", (("value", value),), "why")
    return Fix("sysctl net.ipv4.tcp_syncookies", "0", "1", (setting,), note="a note")


def test_an_equal_fix_gets_the_kept_layout() -> None:
    first, second = view._fix_view(_fix(1)), view._fix_view(_fix(1))
    assert second is first
    assert first == view._lay_out_fix(_fix(1))
    assert ("profile", 'sysctl."net.ipv4.tcp_syncookies" = { value = 1, reason = "why" }') in (
        first.details
    )


def test_equal_values_of_another_type_are_laid_out_apart() -> None:
    assert _fix(1) == _fix(True)  # (what a plain cache would confuse)
    as_int, as_bool = view._fix_view(_fix(1)), view._fix_view(_fix(True))
    assert as_int.details != as_bool.details
    assert as_bool == view._lay_out_fix(_fix(True))
    assert any("value = true" in text for _, text in as_bool.details)


def test_a_fix_that_cannot_be_hashed_is_laid_out() -> None:
    fx = _fix(["a", "b"])
    assert view._fix_view(fx) == view._lay_out_fix(fx)


def test_the_kept_layouts_are_bounded() -> None:
    for n in range(view._FIX_VIEWS_KEPT * 2 + 3):
        view._fix_view(_fix(n))
    assert 0 < len(view._FIX_VIEWS) <= view._FIX_VIEWS_KEPT
