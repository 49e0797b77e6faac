"""Which budget a host spends when a policy groups hosts: its registrable domain, from the public
suffix list the package ships (nothing is downloaded at run time)."""

from __future__ import annotations

import ipaddress

from publicsuffixlist import PublicSuffixList

_psl = PublicSuffixList()


def registrable_domain(host: str) -> str:
    """``img.shop.co.uk`` -> ``shop.co.uk``. An address, a bare public suffix or a single label
    (``localhost``) has no registrable domain: it stands for itself."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return _psl.privatesuffix(host) or host
    return host
