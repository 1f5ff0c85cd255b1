"""Which distribution folder a release tag names, refusing a tag whose version is not the source's.

Release tags are ``<distribution>-v<version>``, for example
``agentium-harness-v0.1.0`` or ``agentium-archive-s3-v0.2.1``: each
distribution is versioned and released on its own. The folder is found by
reading every distribution's ``pyproject.toml`` (``core/``, ``plugins/*/``,
``integrations/*/``), and the version is the ``__version__`` that hatch reads
(``[tool.hatch.version] path``), so a tag can only publish what the source
says. Used by ``.github/workflows/release.yml``; tested by
``tests/test_packaging.py``.

Usage: ``python .github/scripts/release_target.py TAG``. Prints the folder,
and with ``GITHUB_OUTPUT`` set also writes ``folder=``, ``name=`` and
``version=`` lines there. Exits 2 with a message on a bad tag.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TAG = re.compile(r"^(agentium-[a-z0-9]+(?:-[a-z0-9]+)*)-v(\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?(?:\.post\d+)?)$")
VERSION_LINE = re.compile(r'^__version__\s*=\s*"([^"]+)"\s*$', re.M)


def distributions() -> dict[str, Path]:
    """Distribution name -> folder, for core/ and every folder under plugins/ and integrations/."""
    folders = [ROOT / "core"]
    for group in ("plugins", "integrations"):
        if (ROOT / group).is_dir():
            folders.extend(p for p in sorted((ROOT / group).iterdir()) if (p / "pyproject.toml").is_file())
    return {tomllib.loads((f / "pyproject.toml").read_text("utf-8"))["project"]["name"]: f for f in folders}


def source_version(folder: Path) -> str:
    """The ``__version__`` in the file named by ``[tool.hatch.version] path``."""
    data = tomllib.loads((folder / "pyproject.toml").read_text("utf-8"))
    path = folder / data["tool"]["hatch"]["version"]["path"]
    found = VERSION_LINE.findall(path.read_text("utf-8"))
    if len(found) != 1:
        raise SystemExit(f'{path}: expected exactly one __version__ = "..." line')
    return found[0]


def main(argv: list[str]) -> int:
    """Resolve the tag in ``argv[0]``; 0 on success, 2 with a message on stderr otherwise."""
    if len(argv) != 1:
        print("usage: release_target.py TAG   (TAG is <distribution>-v<version>)", file=sys.stderr)
        return 2
    tag = argv[0].removeprefix("refs/tags/")
    match = TAG.fullmatch(tag)
    if match is None:
        print(
            f"{tag!r} is not a release tag: use <distribution>-v<version>, e.g. agentium-harness-v0.1.0",
            file=sys.stderr,
        )
        return 2
    name, version = match.groups()
    known = distributions()
    folder = known.get(name)
    if folder is None:
        print(
            f"{name!r} is not a distribution in this repository; known: {', '.join(sorted(known))}",
            file=sys.stderr,
        )
        return 2
    source = source_version(folder)
    if source != version:
        print(
            f"tag {tag} says {version} but {name}'s __version__ is {source}: bump the source first, then tag",
            file=sys.stderr,
        )
        return 2
    rel = folder.relative_to(ROOT).as_posix()
    print(rel)
    output = os.environ.get("GITHUB_OUTPUT")
    if output:
        with open(output, "a", encoding="utf-8") as fh:
            fh.write(f"folder={rel}\nname={name}\nversion={version}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
