"""Which budget a host spends when a policy groups hosts: its registrable domain, from the public
suffix list the package ships (nothing is downloaded at run time)."""

from __future__ import annotations

import functools
import ipaddress
import threading

from publicsuffixlist import PublicSuffixList

# Parsing the list costs about 0.3 CPU-seconds: done at the first lookup, not by every process that
# imports this module (beat, the control worker, the admin's autodiscovery: NFR-42). The lock makes
# a worker's threads asking at once parse it once.
_psl_lock = threading.Lock()


@functools.cache
def _psl() -> PublicSuffixList:
    return PublicSuffixList()


def registrable_domain(host: str) -> str:
    """``img.shop.co.uk`` -> ``shop.co.uk``. An address, a bare public suffix or a single label
    (``localhost``) has no registrable domain: it stands for itself."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        with _psl_lock:
            psl = _psl()
        return psl.privatesuffix(host) or host
    return host
