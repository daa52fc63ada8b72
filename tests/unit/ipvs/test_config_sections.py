"""lbtune.ipvs.config.SectionCache (what `lbtune ipvs serve` reads configs through): it
returns exactly what the whole read returns, or None, for every text, and reads again only
the `[[service]]` sections that changed."""

from __future__ import annotations

import random
from typing import Optional

import pytest

from lbtune.errors import BadInput
from lbtune.ipvs.config import DirectorConfig, SectionCache, parse_config_text

HEAD = """[director]
drain_timeout = 5

[[vip]]
address = "10.9.0.1"
dev = "lo"

[timeouts]
tcp = 600
"""


def service(port: int, reals: int = 3, weight: int = 1, vip: str = "10.9.0.1") -> str:
    out = [f'[[service]]\naddress = "{vip}"\nport = {port}\nscheduler = "wrr"\n']
    for r in range(1, reals + 1):
        out.append(f'[[service.real_server]]\naddress = "10.10.0.{r}"\nweight = {weight + r}\n')
    return "".join(out)


def doc(n: int = 20, **edits: int) -> str:
    return HEAD + "".join(service(8000 + i, weight=edits.get(f"w{i}", 1)) for i in range(n))


def whole(text: str) -> Optional[DirectorConfig]:
    try:
        return parse_config_text(text, "t.toml")
    except BadInput:
        return None


def agrees(cache: SectionCache, text: str) -> Optional[DirectorConfig]:
    """The invariant: the cache's answer is None or the whole read's; an error is None."""
    got = cache.parse(text, "t.toml")
    want = whole(text)
    if got is not None:
        assert want is not None and got == want
    return got


def test_an_edit_reads_only_the_sections_that_changed():
    cache = SectionCache()
    first = agrees(cache, doc())
    assert first is not None and (cache.read, cache.kept) == (20, 0)
    again = agrees(cache, doc())
    assert again is not None and (cache.read, cache.kept) == (0, 20)
    assert all(a is b for a, b in zip(first.services, again.services))  # the same objects
    edited = agrees(cache, doc(w7=5))
    assert edited is not None and (cache.read, cache.kept) == (1, 19)
    assert edited.services[7] != first.services[7]
    assert all(edited.services[i] is first.services[i] for i in range(20) if i != 7)
    assert edited.services[7].servers[0].weight == 6


def test_the_rest_of_the_document_is_read_every_time():
    cache = SectionCache()
    agrees(cache, doc())
    cfg = agrees(cache, doc().replace("drain_timeout = 5", "drain_timeout = 9"))
    assert cfg is not None and cfg.drain_timeout == 9.0 and cache.kept == 20
    quoted = doc().replace("[timeouts]", '[sysctl]\n"net.ipv4.vs.expire_nodest_conn" = 1\n'
                           "[timeouts]")  # outside the plain subset: tomllib reads the rest
    cfg = agrees(cache, quoted)
    assert cfg is not None and cfg.sysctls == (("net.ipv4.vs.expire_nodest_conn", "1"),)


@pytest.mark.parametrize("text", [
    doc() + "[director]\nprune = \"none\"\n",  # a table after the sections
    doc() + '[[vip]]\naddress = "10.9.0.2"\ndev = "lo"\n',
    HEAD + service(1) + "[[service]] # a comment\n" + service(2)[12:],  # another header
    HEAD + service(1) + "  [[service]]\n" + service(2)[12:],
    HEAD + service(1) + service(1),  # the same section twice
    HEAD + service(1) + service(1, weight=3),  # one service twice, two texts
    HEAD + 'service = 1\n' + service(1),
    HEAD + '[service]\nport = 1\n' + service(1),
    '[[service]]\nport = 1\n',  # no address
    HEAD + service(1).replace("port = 1", "port = 99999"),
    HEAD + 'note = """\n[[service]]\n"""\n' + service(1),  # a cut inside a string
    HEAD + service(1) + '[[service]]\naddress = "10.9.0.1"\nport = 2\nx = """a\n"""\n',
    HEAD + service(1).replace('"wrr"', '"wrr" # c'),
    HEAD.replace("\n", "\r\n") + service(1),
    "",
    "[[service]]\n",
    "\n[[service]]\n[[service]]\n",
])  # fmt: skip
def test_hostile_texts_get_the_whole_reads_answer_or_none(text):
    cache = SectionCache()
    agrees(cache, doc())  # a cache full of another document's sections
    agrees(cache, text)
    agrees(SectionCache(), text)


def test_random_edits_of_a_document_always_agree_with_the_whole_read():
    rng = random.Random(18)  # noqa: S311 (a fixed sequence of edits, not a secret)
    cache = SectionCache()
    lines = doc(12).split("\n")
    for _ in range(300):
        text = list(lines)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(text))
            op = rng.randrange(5)
            if op == 0:
                del text[i]
            elif op == 1:
                text.insert(i, rng.choice(text))  # a line somewhere else
            elif op == 2:
                text[i] = text[i].replace("1", str(rng.randint(0, 9)))
            elif op == 3:
                text.insert(i, rng.choice(["[[service]]", "[director]", "# x", "", "port = 7",
                                           "[[service.real_server]]", 'x = "y"']))
            else:
                text[i] = " " + text[i]
        agrees(cache, "\n".join(text))
        agrees(cache, doc(12))
