"""Whether every connection made with one set of options reaches one server (for the identity).

A multi-host connection string (``host=a,b``, ``postgresql://h1,h2/db``) names a list of
servers; which one a connection lands on depends on ``load_balance_hosts`` and on which of them
answers. Two adapters given such a string are one database for a joint commit only when that is
certain: the same list in the same order (the identity compares it as written) tried in that
order, never shuffled. psycopg shuffles the list itself for ``load_balance_hosts=random`` (whatever
the libpq version), and libpq does it for a list taken from a service file: each connection then
picks its own server, and a joint commit written through the session store's connection could be
read back by the archive from another server.
"""

from __future__ import annotations

import configparser
import functools
import ipaddress
import os
from pathlib import Path
from typing import Any, Final

__all__ = ["may_reach_several_servers"]

#: The environment variable libpq reads for each option that chooses among several hosts.
_ENVIRONMENT: Final = {
    "host": "PGHOST",
    "hostaddr": "PGHOSTADDR",
    "port": "PGPORT",
    "load_balance_hosts": "PGLOADBALANCEHOSTS",
}


@functools.lru_cache(maxsize=8)
def _parsed_service_file(path: str, mtime_ns: int, size: int) -> dict[str, dict[str, str]] | None:
    """The services of the file at ``path`` (cached while its mtime and size stay), ``None`` if unreadable.

    Cached because the engine asks at every evicting commit and the file rarely changes; libpq's
    format: ``#`` comments, ``[service]`` sections, ``key=value`` lines, keys case-sensitive.
    """
    # No "[DEFAULT]" section merged into the others: libpq has none ("\n" is no section name).
    parser = configparser.RawConfigParser(
        delimiters=("=",), comment_prefixes=("#",), strict=False, default_section="\n"
    )
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        with open(path, encoding="utf-8") as handle:
            parser.read_file(handle)
    except (OSError, UnicodeDecodeError, configparser.Error):  # unreadable: nothing is certain
        return None
    return {
        section: {key.strip(): value.strip() for key, value in parser.items(section)}
        for section in parser.sections()
    }


def _service_options(name: str) -> dict[str, str] | None:
    """The options service ``name`` sets in the user's service file, or ``None`` if not known here.

    libpq reads ``PGSERVICEFILE`` (else ``~/.pg_service.conf``) and, only when the service is
    not there, the system-wide file in ``PGSYSCONFDIR`` or the directory it was compiled with,
    which is not known here: a service found nowhere readable is not known (``None``).
    """
    # expanduser, not Path.home(): without a home folder it leaves "~" (no such file), never raises.
    user_file = os.environ.get("PGSERVICEFILE") or os.path.expanduser("~/.pg_service.conf")
    system_dir = os.environ.get("PGSYSCONFDIR")
    files = [user_file] + ([str(Path(system_dir) / "pg_service.conf")] if system_dir else [])
    for file in files:
        try:
            status = os.stat(file)
        except FileNotFoundError:
            continue
        except OSError:
            return None
        services = _parsed_service_file(file, status.st_mtime_ns, status.st_size)
        if services is None:
            return None
        if name in services:
            return services[name]
    return None


def _effective(info: dict[str, Any]) -> dict[str, str] | None:
    """The host-choosing options a connection uses: the string's, a service's, the environment's.

    libpq's order: the connection string, then the service file, then the environment.
    ``None`` when a service is named that cannot be read here.
    """
    service = info.get("service") or os.environ.get("PGSERVICE")
    from_service: dict[str, str] = {}
    if service:
        found = _service_options(str(service))
        if found is None:
            return None
        from_service = found
    chosen: dict[str, str] = {}
    for key, variable in _ENVIRONMENT.items():
        value = info.get(key)
        if value is None:
            value = from_service.get(key)
        if value is None:
            value = os.environ.get(variable)
        if value is not None:
            chosen[key] = str(value)
    return chosen


def may_reach_several_servers(info: dict[str, Any]) -> bool:
    """True unless every connection made with the parsed options ``info`` reaches one server.

    True for several hosts, or one host name given without its ``hostaddr``, with
    ``load_balance_hosts`` other than ``disable`` (``random`` shuffles the list, and the addresses
    a name resolves to, per connection; any other value libpq refuses), for hosts, addresses and ports that
    do not pair up (libpq refuses them too: nothing about them is certain), and for a service
    whose options cannot be read here. One host address or socket folder, or hosts always tried
    in the written order, is one server to the identity (which then compares the list itself,
    order and ports as written).
    """
    chosen = _effective(info)
    if chosen is None:
        return True
    hosts, addresses, ports = (
        chosen["host"].split(",") if "host" in chosen else [],
        chosen["hostaddr"].split(",") if "hostaddr" in chosen else [],
        chosen["port"].split(",") if "port" in chosen else [],
    )
    count = max(len(hosts), len(addresses))
    if hosts and addresses and len(hosts) != len(addresses):
        return True
    if len(ports) > 1 and len(ports) != count:
        return True
    if chosen.get("load_balance_hosts", "disable") == "disable":
        return False
    # Shuffled: several entries, or one host name without its address (psycopg, and libpq for a
    # service's list, shuffle the addresses a name resolves to as well: round-robin DNS is a list).
    # An entry with its hostaddr (not empty) is not looked up. Lengths: equal, or no hosts at all.
    given = addresses or [""] * len(hosts)
    pairs = zip(hosts, given, strict=False)
    return count > 1 or any(_may_resolve_to_several(host) for host, address in pairs if not address)


def _may_resolve_to_several(host: str) -> bool:
    """True for a host name (looked up, possibly several addresses); not a socket folder or an IP address."""
    # psycopg's own test for "nothing to look up": empty, a socket folder, a Windows drive path.
    if not host or host.startswith("/") or host[1:2] == ":":
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return True
    return False
