"""The robots.txt matcher (RFC 9309 2.2.2-2.2.3, NFR-22): the cases of Google's reference parser
(github.com/google/robotstxt, robots_test.cc: ID_LongestMatch, ID_SpecialCharacters, ID_Encoding
and the documentation checks), linear time against a hostile file, and the caps on rules and
wildcards (docs/limits.md)."""

from __future__ import annotations

import time

import pytest

from apps.politeness.robots_rules import robots_parse


def allowed(rules: str, path: str) -> bool:
    return robots_parse("user-agent: FooBot\n" + rules, product="foobot").allows(path)


@pytest.mark.parametrize(
    ("rules", "path", "expected"),
    [
        # ID_LongestMatch: the most octets win; on a tie the least strict (allow).
        ("disallow: /x/page.html\nallow: /x/\n", "/x/page.html", False),
        ("allow: /x/page.html\ndisallow: /x/\n", "/x/page.html", True),
        ("allow: /x/page.html\ndisallow: /x/\n", "/x/", False),
        ("disallow: \nallow: \n", "/x/page.html", True),
        ("disallow: /\nallow: /\n", "/x/page.html", True),
        ("disallow: /x\nallow: /x/\n", "/x", False),
        ("disallow: /x\nallow: /x/\n", "/x/", True),
        ("disallow: /x/page.html\nallow: /x/page.html\n", "/x/page.html", True),
        ("allow: /page\ndisallow: /*.html\n", "/page.html", False),
        ("allow: /page\ndisallow: /*.html\n", "/page", True),
        ("allow: /x/page.\ndisallow: /*.html\n", "/x/page.html", True),
        ("allow: /x/page.\ndisallow: /*.html\n", "/x/y.html", False),
        # ID_SpecialCharacters: * any run, $ the end, # a comment.
        ("Disallow: /foo/bar/quz\nAllow: /foo/*/qux\n", "/foo/bar/quz", False),
        ("Disallow: /foo/bar/quz\nAllow: /foo/*/qux\n", "/foo/quz", True),
        ("Disallow: /foo/bar/quz\nAllow: /foo/*/qux\n", "/foo//quz", True),
        ("Disallow: /foo/bar/quz\nAllow: /foo/*/qux\n", "/foo/bax/quz", True),
        ("Disallow: /foo/bar$\nAllow: /foo/bar/qux\n", "/foo/bar", False),
        ("Disallow: /foo/bar$\nAllow: /foo/bar/qux\n", "/foo/bar/qux", True),
        ("Disallow: /foo/bar$\nAllow: /foo/bar/qux\n", "/foo/bar/", True),
        ("Disallow: /foo/bar$\nAllow: /foo/bar/qux\n", "/foo/bar/baz", True),
        ("# Disallow: /\nDisallow: /foo/quz#qux\nAllow: /\n", "/foo/bar", True),
        ("# Disallow: /\nDisallow: /foo/quz#qux\nAllow: /\n", "/foo/quz", False),
        # ID_AllowDisallow_Value_CaseSensitive
        ("disallow: /x/\n", "/x/y", False),
        ("disallow: /X/\n", "/x/y", True),
        # ID_Encoding: a rule's non-ASCII octets compare percent-encoded.
        (
            "Disallow: /\nAllow: /foo/bar?qux=taz&baz=http://foo.bar?tar&par\n",
            "/foo/bar?qux=taz&baz=http://foo.bar?tar&par",
            True,
        ),
        ("Disallow: /\nAllow: /foo/bar/ツ\n", "/foo/bar/%E3%83%84", True),
        ("Disallow: /\nAllow: /foo/bar/%E3%83%84\n", "/foo/bar/%E3%83%84", True),
        # GoogleOnly_DocumentationChecks (the RFC's examples of * and $).
        ("disallow: /\nallow: /fish\n", "/bar", False),
        ("disallow: /\nallow: /fish\n", "/fish.html", True),
        ("disallow: /\nallow: /fish\n", "/fishheads/yummy.html", True),
        ("disallow: /\nallow: /fish\n", "/Fish.asp", False),
        ("disallow: /\nallow: /fish\n", "/catfish", False),
        ("disallow: /\nallow: /fish\n", "/?id=fish", False),
        ("disallow: /\nallow: /fish*\n", "/fish", True),
        ("disallow: /\nallow: /fish*\n", "/fishheads", True),
        ("disallow: /\nallow: /fish*\n", "/catfish", False),
        ("disallow: /\nallow: /fish/\n", "/fish/?salmon", True),
        ("disallow: /\nallow: /fish/\n", "/fish", False),
        ("disallow: /\nallow: /*.php\n", "/filename.php", True),
        ("disallow: /\nallow: /*.php\n", "/folder/filename.php?parameters", True),
        ("disallow: /\nallow: /*.php\n", "/folder/any.php.file.html", True),
        ("disallow: /\nallow: /*.php\n", "/", False),
        ("disallow: /\nallow: /*.php\n", "/windows.PHP", False),
        ("disallow: /\nallow: /*.php$\n", "/filename.php", True),
        ("disallow: /\nallow: /*.php$\n", "/folder/filename.php", True),
        ("disallow: /\nallow: /*.php$\n", "/filename.php?parameters", False),
        ("disallow: /\nallow: /*.php$\n", "/filename.php/", False),
        ("disallow: /\nallow: /*.php$\n", "/filename.php5", False),
        ("disallow: /\nallow: /fish*.php\n", "/fish.php", True),
        ("disallow: /\nallow: /fish*.php\n", "/fishheads/catfish.php?parameters", True),
        ("disallow: /\nallow: /fish*.php\n", "/Fish.PHP", False),
        ("allow: /p\ndisallow: /\n", "/page", True),
        ("allow: /folder\ndisallow: /folder\n", "/folder/page", True),
        ("allow: /page\ndisallow: /*.htm\n", "/page.htm", False),
        ("allow: /$\ndisallow: /\n", "/", True),
        ("allow: /$\ndisallow: /\n", "/page.html", False),
        # A $ inside a pattern is a plain character; ** is one wildcard.
        ("disallow: /a$b\n", "/a$b/c", False),
        ("disallow: /a**b$\n", "/a/x/b", False),
        ("disallow: /a**b$\n", "/a/x/bc", True),
    ],
)
def test_the_matcher_agrees_with_the_reference_parser(rules: str, path: str, expected: bool) -> None:
    assert allowed(rules, path) is expected


@pytest.mark.serial
def test_a_hostile_file_is_matched_in_time_linear_in_the_path() -> None:
    """The rules a backtracking regular expression takes forever on (``.*a.*a...`` against a run
    of ``a`` with no ``b``), as many as the cap allows, against the longest URL intake takes: well
    under a second for the whole file, and doubling the path about doubles the time."""
    hostile = "User-agent: *\n" + "".join(
        f"Disallow: /*a*a*a*a*a*a*a*a*a*a{'a' * (i % 50)}b{i}$\n" for i in range(2000)
    )
    rules = robots_parse(hostile, product="scrapejobs")
    assert len(rules.rules) == 2000

    def timed(n: int) -> float:
        # time is the subject: how the match grows with the path. The best of five runs: a run
        # the scheduler preempted says nothing of the matcher.
        spent = []
        for _ in range(5):
            started = time.perf_counter()
            assert rules.allows("/" + "a" * n)
            spent.append(time.perf_counter() - started)
        return min(spent)

    short, long = timed(4000), timed(8000)
    assert long < 1.0, long
    assert long < 4 * short + 0.05, (short, long)
    assert not rules.allows("/" + "a" * 8000 + "b7")


def test_rules_past_the_cap_are_ignored(settings) -> None:
    settings.SCRAPEJOBS_ROBOTS_MAX_RULES = 3
    rules = robots_parse(
        "User-agent: *\nDisallow: /a\nDisallow: /b\nDisallow: /c\nDisallow: /d\n", product="scrapejobs"
    )
    assert [rules.allows(p) for p in ("/a", "/b", "/c", "/d")] == [False, False, False, True]


def test_past_the_wildcard_cap_a_disallow_disallows_more_and_an_allow_is_dropped(settings) -> None:
    """Erring on the side of not fetching: the disallow is cut after its third wildcard (so it now
    also matches ``/x1x2x3x``, which its fourth piece would have refused), the allow is gone."""
    settings.SCRAPEJOBS_ROBOTS_MAX_WILDCARDS = 3
    rules = robots_parse(
        "User-agent: *\nDisallow: /x*1*2*3*4$\nAllow: /y*1*2*3*4\nDisallow: /y\n", product="scrapejobs"
    )
    assert not rules.allows("/x-1-2-3-4")
    assert not rules.allows("/x1x2x3x")
    assert not rules.allows("/y1234")
    settings.SCRAPEJOBS_ROBOTS_MAX_WILDCARDS = 4
    rules = robots_parse(
        "User-agent: *\nDisallow: /x*1*2*3*4$\nAllow: /y*1*2*3*4\nDisallow: /y\n", product="scrapejobs"
    )
    assert rules.allows("/x1x2x3x")
    assert rules.allows("/y1234")
