"""Text the engine keeps or shows: bounded free text, and addresses without their secrets.

Free text from an adapter (a verifier's reason, a provider's error) ends up
in retained records, snapshots and model requests. It is cut to a byte
bound at a character boundary, with a marker saying how much was left out,
so a 1 MB reason can never become a 1 MB block or a 2 MB snapshot.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

__all__ = ["clean_text", "cut_text", "error_text", "one_line", "redact_url", "shorten"]

#: Any surrogate code point: in a Python string one is always lone (a pair is one code point),
#: so this is exactly what UTF-8 cannot encode.
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` as a plain ``str`` with every lone surrogate replaced by U+FFFD: text that can be stored.

    For free text the engine only reports (an adapter's error message, a
    detail): refusing it would lose what it reports, so it is mended instead.
    A ``str`` subclass is read with ``str.__str__``, none of its own methods trusted.
    """
    plain = str.__str__(text)
    return plain if plain.isascii() else _SURROGATE.sub("\ufffd", plain)


#: Every line break ``str.splitlines`` knows, and the backslash that writes them (see :func:`one_line`).
_LINE_ESCAPES: dict[int, str] = {
    ord("\\"): "\\\\",
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    **{ord(c): f"\\u{ord(c):04x}" for c in "\v\f\x1c\x1d\x1e\x85\u2028\u2029"},
}


def one_line(text: str) -> str:
    r"""``text`` on one line: its line breaks written ``\n``, ``\r``, ``\u2028``… and a backslash ``\\``.

    For text the engine lays out one item per line in what a model reads
    (a group's messages, a verifier's reason and evidence): a line break in
    the text could otherwise start a line that reads as another item (an
    ``assistant:`` message, a ``verdict: pass``). Injective, so the line
    reads back exactly. A ``str`` subclass is read with ``str.__str__``.
    """
    return str.translate(str.__str__(text), _LINE_ESCAPES)


def error_text(exc: BaseException, *, named: bool = True) -> str:
    """``Type: message`` of an adapter's (or a tool's) exception, as text that can be stored; never raises.

    ``named=False`` gives the message alone.

    The exception is foreign: its ``__str__`` may raise or return something
    that is not a ``str``, and its message (or even its class name) may hold
    a lone surrogate. Either would otherwise turn a reported failure into a
    crash, or lose the turn when the record holding the text is encoded.
    """
    name = clean_text(type(exc).__name__)
    try:
        message = clean_text(str(exc))
    except Exception:
        return f"{name} (its message could not be read)" if named else "(its message could not be read)"
    return f"{name}: {message}" if named else message


def cut_text(text: str, max_bytes: int) -> tuple[str, int]:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes, marker included; ``(text, bytes left out)``."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text, 0
    marker = f" … [{len(data)} bytes, cut]"
    room = max(0, max_bytes - len(marker.encode("utf-8")))
    # ``ignore`` drops a character cut in half at the end, so the result stays valid text.
    kept = data[:room].decode("utf-8", "ignore")
    return kept + marker, len(data) - len(kept.encode("utf-8"))


def shorten(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` characters, the last one ``…`` when anything was cut.

    For a quote in a message or a line of output, where a character bound
    reads better than :func:`cut_text`'s byte bound and its marker.
    """
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def redact_url(url: str) -> str:
    """``url`` without credentials or query string: ``redis://***@host:6379/0``; never raises.

    The user name, the password and the query string (clients read secrets
    from it too: redis-py a ``password=``, S3 presigned URLs a signature) are
    replaced by ``***``; scheme, host, port and path stay, so the result
    names the server in messages, logs, probe output and ``repr``. A URL that
    does not parse reads ``<unparsable url>``.
    """
    if not isinstance(url, str):  # "never raises": an int or a list raised AttributeError or TypeError
        return "<unparsable url>"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "<unparsable url>"
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    auth = "***@" if (parts.username or parts.password) else ""
    query = "?***" if parts.query else ""
    return f"{parts.scheme}://{auth}{host}{port}{parts.path}{query}"
