"""The address guard's rule, address by address, and name resolution through it."""

import ipaddress
import socket

import pytest
from django.test import override_settings

from apps.outbound.addresses import AddressRefused, is_public_address, resolve_allowed


@pytest.mark.parametrize(
    "ip",
    [
        "127.0.0.1",  # loopback
        "127.8.9.10",
        "::1",
        "10.0.0.1",  # private
        "172.16.5.4",
        "192.168.1.1",
        "fd12:3456::1",  # unique local
        "169.254.1.1",  # link-local
        "fe80::1",
        "169.254.169.254",  # cloud metadata
        "fd00:ec2::254",
        "100.64.0.1",  # carrier-grade NAT
        "100.127.255.254",
        "224.0.0.251",  # multicast
        "ff02::1",
        "0.0.0.0",  # unspecified
        "::",
        "240.0.0.1",  # reserved
        "255.255.255.255",
        "192.0.2.10",  # documentation
        "198.18.0.1",  # benchmarking
        "::ffff:127.0.0.1",  # IPv4-mapped loopback
        "::ffff:10.0.0.1",
        "::ffff:169.254.169.254",
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "168.63.129.16",  # Azure's host service, in public space
    ],
)
def test_it_refuses_a_non_public_address(ip):
    assert not is_public_address(ip)


@pytest.mark.parametrize(
    "ip", ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8"]
)
def test_it_accepts_a_public_address(ip):
    assert is_public_address(ip)


def _stub(answers):
    def resolve(host, port):
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "no such name")
        return [(socket.AF_INET6 if ":" in ip else socket.AF_INET, (ip, port)) for ip in answers[host]]

    return resolve


@override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False)
def test_a_name_resolving_only_to_private_addresses_is_refused():
    with pytest.raises(AddressRefused):
        resolve_allowed("intranet.test", 80, resolver=_stub({"intranet.test": ["10.1.1.1", "127.0.0.1"]}))


@override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False)
def test_only_the_public_answers_of_a_mixed_name_are_candidates():
    got = resolve_allowed("mixed.test", 443, resolver=_stub({"mixed.test": ["127.0.0.1", "8.8.8.8", "::1"]}))
    assert [sockaddr[0] for _family, sockaddr in got] == ["8.8.8.8"]


@override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=True)
def test_private_addresses_pass_when_the_operator_allows_them():
    got = resolve_allowed("local.test", 80, resolver=_stub({"local.test": ["127.0.0.1"]}))
    assert got == [(socket.AF_INET, ("127.0.0.1", 80))]


def test_a_name_that_does_not_resolve_raises_a_resolution_error():
    with pytest.raises(socket.gaierror):
        resolve_allowed("nowhere.test", 80, resolver=_stub({}))


@override_settings(
    SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False,
    SCRAPEJOBS_ALLOWED_TARGET_NETWORKS=(ipaddress.ip_network("127.0.0.2/32"),),
)
def test_an_allowed_network_passes_while_every_other_private_address_is_refused():
    """SCRAPEJOBS_ALLOWED_TARGET_NETWORKS: the operator's exceptions, and nothing more."""
    got = resolve_allowed("both.test", 80, resolver=_stub({"both.test": ["127.0.0.1", "127.0.0.2", "::1"]}))
    assert [sockaddr[0] for _family, sockaddr in got] == ["127.0.0.2"]
    with pytest.raises(AddressRefused):
        resolve_allowed("other.test", 80, resolver=_stub({"other.test": ["127.0.0.1", "::1"]}))
