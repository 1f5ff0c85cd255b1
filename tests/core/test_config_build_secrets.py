"""A factory's failure never repeats a value a ``${VAR}`` reference supplied (docs/config.md).

The loader hid such values from every check's message, but a factory that raised was reported
as ``plugin 'x' failed to build: <its message>`` as it was: one naming its token or host (as a
client library's URL error does) printed the secret in ``agentium run``'s error.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import attrs
import pytest

from agentium_harness._config.runtime import load_runtime
from agentium_harness._errors import ConfigError
from agentium_harness._plugins.hookspecs import hookimpl
from agentium_harness._plugins.registry import PluginRegistry
from agentium_harness._plugins.spec import AdapterSpec
from agentium_harness._text import cut_text, shorten

HIDDEN = "<a value from the environment, not shown>"


@attrs.frozen
class _Options:
    token: str = ""
    host: str = ""
    retries: int = 3


def _connect_message(config: _Options) -> str:
    return f"cannot connect to {config.host!r} with token {config.token} ({config.retries} tries)"


def _registry(message: Callable[[_Options], str] = _connect_message) -> PluginRegistry:
    def factory(config: _Options) -> Any:
        raise ValueError(message(config))

    memory_spec = PluginRegistry.load(autoload=False).get("archive", "memory")

    def agentium_register_archives(register: Any) -> None:
        register(AdapterSpec("leaky", memory_spec.adapter_class, _Options, factory=factory))

    plugin = types.SimpleNamespace(agentium_register_archives=hookimpl(agentium_register_archives))
    return PluginRegistry.load(autoload=False, extra_plugins=[("leaky-dist", plugin)])


@pytest.mark.parametrize("shared", [False, True], ids=["section-options", "shared-table"])
def test_a_factory_failure_does_not_repeat_a_value_from_the_environment(tmp_path: Path, shared: bool) -> None:
    options = 'token = "${TOKEN}"\nhost = "${HOST}"\nretries = "${RETRIES}"\n'
    where = "[plugins.leaky]\n" if shared else "[archive.options]\n"
    path = tmp_path / "agentium.toml"
    path.write_text(
        '[provider]\nplugin = "scripted"\n[session_store]\nplugin = "memory"\n'
        '[archive]\nplugin = "leaky"\n' + where + options,
        encoding="utf-8",
    )
    environ = {"TOKEN": "s3cr3t-token-value", "HOST": "db.internal.example", "RETRIES": "1207"}
    with pytest.raises(ConfigError) as info:
        load_runtime(path, registry=_registry(), environ=environ)
    (issue,) = info.value.issues
    assert issue.path == "$.archive"
    assert issue.message == (
        f"plugin 'leaky' failed to build: cannot connect to {HIDDEN} with token {HIDDEN} ({HIDDEN} tries)"
    )
    assert "s3cr3t" not in str(info.value) and "db.internal" not in str(info.value)


def test_a_factory_failure_without_values_from_the_environment_is_reported_as_it_was(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agentium.toml"
    path.write_text(
        '[provider]\nplugin = "scripted"\n[session_store]\nplugin = "memory"\n'
        '[archive]\nplugin = "leaky"\n[archive.options]\ntoken = "written"\nhost = "h"\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as info:
        load_runtime(path, registry=_registry(), environ={})
    (issue,) = info.value.issues
    assert (
        issue.message == "plugin 'leaky' failed to build: cannot connect to 'h' with token written (3 tries)"
    )


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        # A value that ends the sentence: the full stop kept it from being hidden.
        (
            lambda o: f"unknown host: {o.host}. Check the token {o.token}.",
            f"unknown host: {HIDDEN}. Check the token {HIDDEN}.",
        ),
        # A password in a URL, percent-encoded as a client library writes it.
        (
            lambda o: f"cannot parse redis://:{quote(o.token, safe='')}@{o.host}/0",
            f"cannot parse redis://:{HIDDEN}@{HIDDEN}/0",
        ),
        # Percent-encoded with lower-case hex digits, as some client libraries write it.
        (
            lambda o: f"cannot parse redis://:{quote(o.token, safe='').lower()}@{o.host}/0",
            f"cannot parse redis://:{HIDDEN}@{HIDDEN}/0",
        ),
        # Only the whole value: 1207 in 11207, 1207.5 and 3.1207 is not it, 1207 before a full stop is.
        (
            lambda o: f"tried {o.retries}.5 then 3.{o.retries}, 1{o.retries} then {o.retries}.",
            f"tried 1207.5 then 3.1207, 11207 then {HIDDEN}.",
        ),
    ],
    ids=["ends-a-sentence", "percent-encoded", "percent-encoded-lower-case", "whole-tokens-only"],
)
def test_a_factory_failure_hides_a_value_wherever_it_ends_and_however_it_is_encoded(
    tmp_path: Path, message: Callable[[_Options], str], shown: str
) -> None:
    path = tmp_path / "agentium.toml"
    path.write_text(
        '[provider]\nplugin = "scripted"\n[session_store]\nplugin = "memory"\n'
        '[archive]\nplugin = "leaky"\n[archive.options]\n'
        'token = "${TOKEN}"\nhost = "${HOST}"\nretries = "${RETRIES}"\n',
        encoding="utf-8",
    )
    environ = {"TOKEN": "p@ss/w0rd+tail", "HOST": "db.internal.example", "RETRIES": "1207"}
    with pytest.raises(ConfigError) as info:
        load_runtime(path, registry=_registry(message), environ=environ)
    (issue,) = info.value.issues
    assert issue.message == f"plugin 'leaky' failed to build: {shown}"
    assert "w0rd" not in str(info.value) and "db.internal" not in str(info.value)


def _archive_config(tmp_path: Path, options: str) -> Path:
    path = tmp_path / "agentium.toml"
    path.write_text(
        '[provider]\nplugin = "scripted"\n[session_store]\nplugin = "memory"\n'
        '[archive]\nplugin = "leaky"\n[archive.options]\n' + options,
        encoding="utf-8",
    )
    return path


def test_a_value_inside_a_longer_string_is_hidden_exactly_wherever_it_is_repeated(tmp_path: Path) -> None:
    # Only the whole substituted string was hidden: a factory naming the password it parsed out of
    # the DSN printed it, and the DSN itself was hidden whole, the host and user with it.
    path = _archive_config(tmp_path, 'host = "postgresql://app:${PGPASS}@db.example/app"\n')

    def message(o: _Options) -> str:
        url = quote(o.host, safe="")
        return f"cannot connect to {o.host!r}: password {urlsplit(o.host).password} refused; url {url}"

    with pytest.raises(ConfigError) as info:
        load_runtime(path, registry=_registry(message), environ={"PGPASS": "s3cr3t-pw"})
    (issue,) = info.value.issues
    assert issue.message == (
        f"plugin 'leaky' failed to build: cannot connect to 'postgresql://app:{HIDDEN}@db.example/app': "
        f"password {HIDDEN} refused; url postgresql%3A%2F%2Fapp%3A{HIDDEN}%40db.example%2Fapp"
    )
    assert "s3cr3t" not in str(info.value)


def test_a_short_value_alone_is_shown_and_inside_its_string_hidden(tmp_path: Path) -> None:
    # A value as short as "7" or "on" was hidden wherever it stood alone: "refused <hidden> attempt
    # <hidden> of <hidden>" called ordinary words and numbers secrets. Inside the string it was
    # substituted into it is still hidden, exactly there.
    path = _archive_config(tmp_path, 'token = "tok-${SUFFIX}"\nhost = "${HOST}"\nretries = "${RETRIES}"\n')

    def message(o: _Options) -> str:
        return f"token {o.token} refused on attempt {o.retries} of 7 at {o.host}"

    environ = {"SUFFIX": "on", "HOST": "db.internal.example", "RETRIES": "7"}
    with pytest.raises(ConfigError) as info:
        load_runtime(path, registry=_registry(message), environ=environ)
    (issue,) = info.value.issues
    assert issue.message == (
        f"plugin 'leaky' failed to build: token tok-{HIDDEN} refused on attempt 7 of 7 at {HIDDEN}"
    )


def test_a_checks_message_hides_only_the_part_the_environment_supplied(tmp_path: Path) -> None:
    # A validator's "got '<value>'" lost the whole string, what the file wrote around the value too.
    path = tmp_path / "agentium.toml"
    path.write_text(
        '[provider]\nplugin = "scripted"\n[archive]\nplugin = "memory"\n'
        '[session_store]\nplugin = "sqlite"\n[plugins.sqlite]\nsynchronous = "FULL-${SYNC}"\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as info:
        load_runtime(path, registry=PluginRegistry.load(autoload=False), environ={"SYNC": "s3cr3t-VALUE"})
    (issue,) = info.value.issues
    assert issue.path == "$.plugins.sqlite.synchronous" and f"'FULL-{HIDDEN}'" in issue.message, issue
    assert "s3cr3t" not in str(info.value)


@pytest.mark.parametrize(
    ("value", "message", "shown"),
    [
        # A path option is joined to the config's folder as pathlib writes it: "./" and "//" gone, so
        # neither the value nor its folder stood in the adapter's message as the variable gave them.
        (
            "./s3cr3t-dir/state.db",
            lambda o: f"cannot open {Path('/srv') / o.host}: the folder {Path('/srv') / o.host} is missing",
            f"cannot open /srv/{HIDDEN}: the folder /srv/{HIDDEN} is missing",
        ),
        (
            "s3cr3t-dir//state.db",
            lambda o: f"the folder {(Path('/srv') / o.host).parent} does not exist",
            f"the folder /srv/{HIDDEN} does not exist",
        ),
        (
            "../s3cr3t-dir/state.db",
            lambda o: f"cannot open {Path('/srv/app/', o.host).resolve()}",
            f"cannot open /srv/{HIDDEN}",
        ),
        # A folder given with its final slash: the adapter joins a file name to it.
        (
            "s3cr3t-dir/",
            lambda o: f"cannot open {Path('/srv') / o.host / 'state.db'}",
            f"cannot open /srv/{HIDDEN}/state.db",
        ),
        # A path that needs no rewriting: its parts are not looked for alone ("home" is a word).
        (
            "/home/s3cr3t-user",
            lambda o: f"no home folder at {o.host}/x.db",
            f"no home folder at {HIDDEN}/x.db",
        ),
        # A word is a whole word before or after a full stop: only a number's is part of it (1207.5).
        (
            "s3cr3t-name",
            lambda o: f"no key {o.host}.pem in {o.host}.d, nor db.{o.host}",
            f"no key {HIDDEN}.pem in {HIDDEN}.d, nor db.{HIDDEN}",
        ),
    ],
    ids=["dot-folder", "double-slash", "parent-folder", "final-slash", "plain-path", "word-before-a-dot"],
)
def test_a_value_is_hidden_as_a_path_is_written_and_around_full_stops(
    tmp_path: Path, value: str, message: Callable[[_Options], str], shown: str
) -> None:
    path = _archive_config(tmp_path, 'host = "${HOST}"\n')
    with pytest.raises(ConfigError) as info:
        load_runtime(path, registry=_registry(message), environ={"HOST": value})
    (issue,) = info.value.issues
    assert issue.message == f"plugin 'leaky' failed to build: {shown}"
    assert "s3cr3t" not in str(info.value)


@pytest.mark.parametrize(
    ("options", "message", "shown"),
    [
        # shorten() cut the message inside the value: the part before the "…" was shown.
        (
            'token = "${TOKEN}"\n',
            lambda o: shorten(f"token {o.token} refused", 17),
            f"token {HIDDEN}…",
        ),
        # cut_text()'s marker: " … [n bytes, cut]".
        (
            'token = "${TOKEN}"\n',
            lambda o: cut_text(f"token {o.token} refused " + "x" * 40, 40)[0],
            f"token {HIDDEN} … [83 bytes, cut]",
        ),
        # Inside the string it was substituted into, cut after the value's first characters.
        (
            'host = "postgresql://app:${TOKEN}@db.example/app"\n',
            lambda o: shorten(f"cannot connect to {o.host}", 39),
            f"cannot connect to postgresql://app:{HIDDEN}…",
        ),
    ],
    ids=["shorten", "cut-text", "inside-its-string"],
)
def test_a_value_cut_short_in_a_message_is_hidden_up_to_the_cut(
    tmp_path: Path, options: str, message: Callable[[_Options], str], shown: str
) -> None:
    path = _archive_config(tmp_path, options)
    with pytest.raises(ConfigError) as info:
        load_runtime(path, registry=_registry(message), environ={"TOKEN": "s3cr3t-very-long-token-value"})
    (issue,) = info.value.issues
    assert issue.message == f"plugin 'leaky' failed to build: {shown}"
    assert "s3c" not in str(info.value)
