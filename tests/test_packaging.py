"""Every distribution in the repository is ready to publish, and the docs do not promise PyPI yet.

A distribution folder is ``core/`` and every folder under ``plugins/`` and
``integrations/``: a new one is checked as soon as it exists, with no list to
update. For each, the ``pyproject.toml`` must carry the project's metadata
(licence expression and file, single-sourced version, project URLs under the
repository URL kept in the root ``pyproject.toml``, classifiers, a core
dependency bounded at the next 0.x minor), and the sdist and wheel built from
it must contain the Apache-2.0 licence text and pass ``twine check --strict``.
Its dependencies must name every third-party package its ``src`` imports, and
none at a floor below the core's floor for the same library.

The builds run without build isolation (``hatchling``, ``build`` and ``twine``
come from ``requirements-dev.txt``), so the whole module takes seconds, not
minutes. ``CONTRIBUTING.md`` ("Writing a new plugin" and "Releasing") lists
the same requirements for authors.
"""

from __future__ import annotations

import ast
import configparser
import email.parser
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import agentium_harness

ROOT = Path(__file__).resolve().parents[1]
LICENSE = ROOT / "LICENSE"
#: SHA-256 of the Apache License 2.0 text exactly as the ASF publishes it
#: (https://www.apache.org/licenses/LICENSE-2.0.txt, 202 lines, 11,358 bytes).
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
#: The one place the repository URL is kept.
REPOSITORY: str = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["agentium"][
    "repository"
]
#: Folders whose every subfolder is a distribution (besides core/).
DISTRIBUTION_GROUPS = ("plugins", "integrations")
PYTHONS = ("3.11", "3.12", "3.13")
REQUIRED_CLASSIFIERS = {
    "Development Status :: 3 - Alpha",
    "Programming Language :: Python :: 3",
    "Programming Language :: Python :: 3 :: Only",
    *(f"Programming Language :: Python :: {v}" for v in PYTHONS),
    "Typing :: Typed",
}
URL_LABELS = ("Homepage", "Source", "Issues", "Documentation")
VERSION_LINE = re.compile(r'^__version__\s*=\s*"([^"]+)"\s*$', re.M)


def distribution_folders() -> list[Path]:
    """``core/`` and every folder under ``plugins/`` and ``integrations/`` (caches and dot-folders aside)."""
    folders = [ROOT / "core"]
    for group in DISTRIBUTION_GROUPS:
        if (ROOT / group).is_dir():
            folders.extend(
                sorted(
                    p for p in (ROOT / group).iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
                )
            )
    return folders


FOLDERS = distribution_folders()
IDS = [str(f.relative_to(ROOT)) for f in FOLDERS]


def _pyproject(folder: Path) -> dict[str, Any]:
    path = folder / "pyproject.toml"
    assert path.is_file(), f"{folder.relative_to(ROOT)} is a distribution folder but has no pyproject.toml"
    return tomllib.loads(path.read_text("utf-8"))


def _source_version(folder: Path) -> str:
    """The ``__version__`` in the file hatch reads the version from."""
    version_path = _pyproject(folder)["tool"]["hatch"]["version"]["path"]
    found = VERSION_LINE.findall((folder / version_path).read_text("utf-8"))
    assert len(found) == 1, f"{folder.name}: {version_path} must assign __version__ exactly once"
    return found[0]


CORE_VERSION = Version(_source_version(ROOT / "core"))


def test_the_distribution_folders_are_found() -> None:
    names = {f.relative_to(ROOT).as_posix() for f in FOLDERS}
    assert {"core", "plugins/archive-s3", "plugins/recall-redis", "plugins/verifier-fs"} <= names


def test_the_root_licence_is_the_apache_2_text() -> None:
    assert hashlib.sha256(LICENSE.read_bytes()).hexdigest() == APACHE_2_SHA256


def test_the_core_version_is_agentium_harness_version() -> None:
    assert Version(agentium_harness.__version__) == CORE_VERSION


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_distribution_metadata(folder: Path) -> None:
    data = _pyproject(folder)
    project = data["project"]
    name = project["name"]
    rel = folder.relative_to(ROOT).as_posix()

    # Names: agentium-<...>, never the bare name of the unrelated PyPI project.
    if rel == "core":
        assert name == "agentium-harness"
    else:
        assert name.startswith("agentium-"), name

    # Licence: an SPDX expression (PEP 639), the file shipped, identical to the root copy.
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert (folder / "LICENSE").read_bytes() == LICENSE.read_bytes(), f"{rel}/LICENSE differs from LICENSE"
    assert not [c for c in project.get("classifiers", []) if c.startswith("License ::")], (
        "PEP 639: the licence is the SPDX expression, not a classifier"
    )
    (hatchling,) = [r for r in map(Requirement, data["build-system"]["requires"]) if r.name == "hatchling"]
    assert data["build-system"]["build-backend"] == "hatchling.build"
    assert "1.27.0" in hatchling.specifier and "1.26.3" not in hatchling.specifier, (
        "license-files (PEP 639) needs hatchling >= 1.27"
    )

    # Version: one place, __version__ in the package, read by hatch.
    assert "version" not in project, f"{rel}: the version is dynamic, read from __version__"
    assert project["dynamic"] == ["version"]
    Version(_source_version(folder))

    # Typed: the wheel's package has a py.typed marker.
    (package,) = data["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert (folder / package / "py.typed").is_file()

    # Python versions and status.
    assert project["requires-python"] == ">=3.11"
    classifiers = set(project["classifiers"])
    assert classifiers >= REQUIRED_CLASSIFIERS
    listed = {
        c.rsplit(" :: ", 1)[1]
        for c in classifiers
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    assert listed == set(PYTHONS)

    # Project URLs, all under the one repository URL.
    urls = project["urls"]
    assert set(urls) == set(URL_LABELS)
    assert urls["Homepage"] == REPOSITORY
    assert urls["Issues"] == f"{REPOSITORY}/issues"
    assert urls["Source"] == f"{REPOSITORY}/tree/main/{rel}"
    assert urls["Documentation"].startswith(f"{REPOSITORY}/")

    # The core dependency: at 0.x a minor release may break plugins, so the bound stops before it.
    if rel != "core":
        (core_req,) = [
            Requirement(d) for d in project["dependencies"] if Requirement(d).name == "agentium-harness"
        ]
        spec = core_req.specifier
        assert CORE_VERSION in spec, f"{name} does not accept the current core {CORE_VERSION}"
        ceiling = (
            Version(f"0.{CORE_VERSION.minor + 1}")
            if CORE_VERSION.major == 0
            else Version(f"{CORE_VERSION.major + 1}")
        )
        assert ceiling not in spec and Version(f"{ceiling}.post1") not in spec, (
            f"{name} must require agentium-harness below {ceiling}, got {spec}"
        )
        assert Version("0.0.1") not in spec, f"{name} needs a lower bound on agentium-harness"


# ------------------------------------------------------------------ shared dependency floors


def _lower_bound(req: Requirement) -> Version | None:
    """The lowest version ``req`` accepts by its ``>=``, ``==`` or ``~=`` clauses (``None``: no floor)."""
    lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
    return max(lows) if lows else None


def floors_below_the_core(dependencies: list[str], core_dependencies: list[str]) -> list[str]:
    """The requirements in ``dependencies`` whose floor is below the core's floor for the same library.

    pip installs the core's floor anyway, so a lower one never installs: it only tells a reader
    (and a resolver's error message) that an older release works, which the core's floor test
    says it does not.
    """
    core_floors = {
        _normalized(r.name): low
        for r in map(Requirement, core_dependencies)
        if (low := _lower_bound(r)) is not None
    }
    problems = []
    for req in map(Requirement, dependencies):
        core_low = core_floors.get(_normalized(req.name))
        low = _lower_bound(req)
        if core_low is not None and low is not None and low < core_low:
            problems.append(f"{req} (the core requires {req.name}>={core_low})")
    return problems


def test_the_floor_check_catches_a_floor_below_the_core() -> None:
    core = ["attrs>=24.3", "anyio>=4.14.2", "pluggy>=1.5"]
    assert floors_below_the_core(["attrs>=23.2", "anyio>=4.14.2"], core) == [
        "attrs>=23.2 (the core requires attrs>=24.3)"
    ]
    assert floors_below_the_core(["AnyIO>=4.3,<5"], core)
    assert not floors_below_the_core(["attrs>=25.1", "anyio>=4.14.2", "redis>=8.0", "pluggy"], core)


@pytest.mark.parametrize("folder", FOLDERS[1:], ids=IDS[1:])
def test_no_distribution_declares_a_shared_dependency_below_the_core(folder: Path) -> None:
    problems = floors_below_the_core(
        _pyproject(folder)["project"]["dependencies"], _pyproject(ROOT / "core")["project"]["dependencies"]
    )
    assert problems == [], f"{folder.relative_to(ROOT)} declares floors below the core's: {problems}"


# ------------------------------------------------------------------ declared imports

#: Top-level import names whose distribution is named otherwise: {import: {distribution, ...}}.
IMPORT_DISTRIBUTIONS = {
    "agents": {"openai-agents"},
    "agent_framework": {"agent-framework-core"},
    "opentelemetry": {"opentelemetry-api", "opentelemetry-sdk"},
}
#: Unconditional imports that an extra may satisfy, with the extra: the contract suites in
#: ``agentium_harness.testing`` run under pytest, which a plugin's tests install (``[test]``).
EXTRA_IMPORTS = {("agentium-harness", "pytest"): "test"}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _catches_import_error(node: ast.Try) -> bool:
    names = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    for handler in node.handlers:
        caught = handler.type
        found = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        if caught is None or any(isinstance(c, ast.Name) and c.id in names for c in found):
            return True
    return False


def module_imports(tree: ast.Module) -> Iterator[tuple[str, bool]]:
    """Each absolute import's top-level name, and whether the module needs it to import at all.

    Left out: an import under ``if TYPE_CHECKING:`` (stubs, never imported at run time) and one
    in a ``try`` that catches ``ImportError`` (optional: the code falls back without it). One
    inside a function is deferred (``False``), as is ``importlib.import_module("name")`` with a
    literal name.
    """

    def walk(node: ast.AST, deferred: bool) -> Iterator[tuple[str, bool]]:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from walk(child, deferred)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], not deferred
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0], not deferred
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value.split(".")[0], False
        if isinstance(node, ast.Try) and _catches_import_error(node):
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                yield from walk(child, deferred)
            return
        inner = deferred or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            yield from walk(child, inner)

    yield from walk(tree, False)


def undeclared_imports(sources: dict[str, str], project: dict[str, Any], own: set[str]) -> list[str]:
    """Third-party imports of ``sources`` ({path: code}) that ``project`` does not declare.

    An import the module needs to load must be in ``dependencies``; a deferred one (or one of
    EXTRA_IMPORTS) may instead be in an extra. The standard library and ``own`` packages need nothing.
    """
    required = {_normalized(Requirement(d).name) for d in project.get("dependencies", [])}
    extras = {
        extra: {_normalized(Requirement(d).name) for d in lines}
        for extra, lines in project.get("optional-dependencies", {}).items()
    }
    in_any_extra = set().union(*extras.values())
    problems = set()
    for path, code in sources.items():
        for name, needed in module_imports(ast.parse(code, filename=path)):
            if name in sys.stdlib_module_names or name in own:
                continue
            candidates = {_normalized(d) for d in IMPORT_DISTRIBUTIONS.get(name, {name})}
            if candidates & required:
                continue
            extra = EXTRA_IMPORTS.get((project["name"], name))
            if extra is not None and candidates & extras.get(extra, set()):
                continue
            if not needed and candidates & in_any_extra:
                continue
            where = "dependencies" if needed else "dependencies or an extra"
            problems.add(f"{path}: imports {name}, not in {where}")
    return sorted(problems)


def test_the_import_scan_catches_an_undeclared_import() -> None:
    project = {"name": "agentium-x", "dependencies": ["agentium-harness>=0.1,<0.2", "attrs>=24.3"]}
    project["optional-dependencies"] = {"test": ["pytest>=8"]}
    code = (
        "from __future__ import annotations\n"
        "import os, attrs\n"
        "import sniffio\n"  # arrives through the core, but undeclared
        "from agentium_harness import plugin_api\n"
        "from agentium_x import thing\n"
        "from . import sibling\n"
        "if TYPE_CHECKING:\n    from mypy_boto3_s3 import S3Client\n"
        "try:\n    import opentelemetry\nexcept ImportError:\n    opentelemetry = None\n"
        "def f():\n    import pytest, trio\n    importlib.import_module('numpy')\n"
    )
    assert undeclared_imports({"m.py": code}, project, {"agentium_x"}) == [
        "m.py: imports numpy, not in dependencies or an extra",
        "m.py: imports sniffio, not in dependencies",
        "m.py: imports trio, not in dependencies or an extra",
    ]
    # An extra does not satisfy an import the module needs to load.
    assert undeclared_imports({"m.py": "import pytest\n"}, project, set()) == [
        "m.py: imports pytest, not in dependencies"
    ]


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_every_distribution_declares_what_it_imports(folder: Path) -> None:
    src = folder / "src"
    own = {p.name for p in src.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    sources = {str(p.relative_to(ROOT)): p.read_text("utf-8") for p in sorted(src.rglob("*.py"))}
    problems = undeclared_imports(sources, _pyproject(folder)["project"], own)
    assert problems == [], "declare what the distribution imports directly:\n" + "\n".join(problems)


# ------------------------------------------------------------------ tox


@pytest.mark.parametrize("folder", FOLDERS[1:], ids=IDS[1:])
def test_the_root_tox_has_an_env_for_every_distribution(folder: Path) -> None:
    # As the other plugins have: its own test env in env_list, and its src under mypy --strict.
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini", encoding="utf-8")
    rel = folder.relative_to(ROOT).as_posix()
    env = f"py311-{folder.name}"
    assert env in [e.strip() for e in tox["tox"]["env_list"].split(",")], f"tox.ini: {env} not in env_list"
    assert f"testenv:{env}" in tox, f"tox.ini has no [testenv:{env}]"
    assert f"-e ./{rel}[test]" in tox[f"testenv:{env}"]["deps"].split("\n")
    assert f"{rel}/tests" in tox[f"testenv:{env}"]["commands"]
    assert f"-e ./{rel}" in tox["testenv:type"]["deps"].split("\n")
    assert f"{rel}/src" in tox["testenv:type"]["commands"], f"tox -e type does not check {rel}/src"


# ------------------------------------------------------------------ built distributions


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


#: A folder's (sdist, wheel), or why building it failed.
Built = dict[Path, tuple[Path, Path] | str]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Each folder's (sdist, wheel), built as a release would: the wheel is built from the sdist.

    A folder that fails to build is recorded, not raised, so only its own tests fail.
    """
    out = tmp_path_factory.mktemp("dist")
    result: Built = {}
    for folder in FOLDERS:
        target = out / folder.name
        proc = subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(target), str(folder)],
            capture_output=True,
            text=True,
            check=False,
        )
        sdists, wheels = list(target.glob("*.tar.gz")), list(target.glob("*.whl"))
        if proc.returncode == 0 and len(sdists) == len(wheels) == 1:
            result[folder] = (sdists[0], wheels[0])
        else:
            result[folder] = f"building {folder.relative_to(ROOT)} failed:\n{proc.stdout}\n{proc.stderr}"
    return result


def _artifacts(built: Built, folder: Path) -> tuple[Path, Path]:
    pair = built[folder]
    if isinstance(pair, str):
        pytest.fail(pair)
    return pair


def _metadata(text: str) -> Message:
    return email.parser.Parser().parsestr(text)


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_built_distributions_carry_the_licence_and_metadata(built: Built, folder: Path) -> None:
    sdist, wheel = _artifacts(built, folder)
    project = _pyproject(folder)["project"]
    version = _source_version(folder)
    base = f"{_normalized(project['name'])}-{version}"
    assert sdist.name == f"{base}.tar.gz" and wheel.name == f"{base}-py3-none-any.whl"
    licence = LICENSE.read_bytes()

    with tarfile.open(sdist) as tar:
        member = tar.extractfile(f"{base}/LICENSE")
        assert member is not None and member.read() == licence, f"{sdist.name} lacks the licence"
        pkg_info = tar.extractfile(f"{base}/PKG-INFO")
        assert pkg_info is not None
        sdist_meta = _metadata(pkg_info.read().decode("utf-8"))
        # A plugin's tox.ini installs the core from ../../core: it only works in a checkout.
        assert f"{base}/tox.ini" not in tar.getnames(), f"{sdist.name} ships tox.ini"
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read(f"{base}.dist-info/licenses/LICENSE") == licence, f"{wheel.name} lacks the licence"
        wheel_meta = _metadata(zf.read(f"{base}.dist-info/METADATA").decode("utf-8"))

    for meta in (sdist_meta, wheel_meta):
        assert meta["Version"] == version
        assert meta["License-Expression"] == "Apache-2.0"
        assert meta.get_all("License-File") == ["LICENSE"]
        assert meta["Requires-Python"] == ">=3.11"
        assert set(meta.get_all("Classifier") or []) >= REQUIRED_CLASSIFIERS
        urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
        assert set(urls) == set(URL_LABELS)
        assert all(u.startswith(REPOSITORY) for u in urls.values())
        if folder.name != "core":
            (core_req,) = [
                Requirement(r)
                for r in meta.get_all("Requires-Dist") or []
                if r.startswith("agentium-harness")
            ]
            assert CORE_VERSION in core_req.specifier and core_req.specifier.contains(
                f"0.{CORE_VERSION.minor}.9"
            )
            assert not core_req.specifier.contains(f"0.{CORE_VERSION.minor + 1}.0")


def test_twine_check_strict_passes_on_every_sdist_and_wheel(built: Built) -> None:
    # A folder that did not build fails its own test above; check everything that did.
    files = [str(p) for pair in built.values() if not isinstance(pair, str) for p in pair]
    assert files
    proc = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == len(files), proc.stdout


# ------------------------------------------------------------------ install instructions

#: ``pip install`` of a name from an index (not a path): ``pip install [options] agentium-x[extra]``.
PYPI_INSTALL = re.compile(
    r"pip3?\s+install\s+(?:(?:-\S+|--\S+)\s+)*['\"]?(agentium(?:-[a-z0-9]+)*)(?:\[[^\]]*\])?['\"]?(?=[\s`'\",;)]|$)",
    re.I,
)
#: How many lines either side of a PyPI install the checkout alternative may be.
NEARBY = 3
#: Folders never scanned: virtual environments (CI's is ``.ci-venv`` at the root), caches, build output.
SKIP_DIRS = {"node_modules", "build", "dist", "__pycache__", "venv"}
#: Python files are scanned under these top folders (tests/ asserts on hint texts, so it is left out).
PYTHON_TOPS = {"core", "plugins", "integrations", "examples", "benchmarks"}


def _documents() -> Iterator[Path]:
    """Markdown anywhere in the repository, and the Python of the distributions, examples and benchmarks."""
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and d not in SKIP_DIRS and not d.endswith(".egg-info")
        )
        here = Path(dirpath)
        top = here.relative_to(ROOT).parts[:1]
        for filename in sorted(filenames):
            if filename.endswith(".md") or (filename.endswith(".py") and top and top[0] in PYTHON_TOPS):
                yield here / filename


def _checkout_folders() -> dict[str, str]:
    return {_pyproject(f)["project"]["name"]: f.relative_to(ROOT).as_posix() for f in FOLDERS}


def pypi_installs_without_checkout(text: str, folders: dict[str, str]) -> list[str]:
    """Lines telling the reader to ``pip install`` an ``agentium`` name from PyPI, no checkout near."""
    lines = text.splitlines()
    problems: list[str] = []
    for n, line in enumerate(lines):
        for match in PYPI_INSTALL.finditer(line):
            name = match.group(1).lower()
            folder = folders.get(name)
            if folder is None:
                problems.append(f"{n + 1}: {name} is not a distribution in this repository: {line.strip()}")
                continue
            window = "\n".join(lines[max(0, n - NEARBY) : n + NEARBY + 1])
            checkout = re.compile(
                r"pip3?\s+install\b[^\n]*?['\"]?\./" + re.escape(folder) + r"(?:[\[/'\"\s`]|$)"
            )
            if not checkout.search(window):
                problems.append(f"{n + 1}: no `pip install ./{folder}` within {NEARBY} lines: {line.strip()}")
    return problems


def test_the_install_scan_catches_a_pypi_promise() -> None:
    folders = {"agentium-harness": "core", "agentium-archive-s3": "plugins/archive-s3"}
    assert pypi_installs_without_checkout("python -m pip install agentium-harness\n", folders)
    assert pypi_installs_without_checkout("`pip install agentium-archive-s3` alone gives it", folders)
    assert pypi_installs_without_checkout("pip install -U 'agentium-archive-s3[test]'", folders)
    assert pypi_installs_without_checkout("pip install agentium", folders)  # the unrelated project
    # The wrong checkout folder does not count.
    assert pypi_installs_without_checkout("pip install agentium-harness\npip install ./plugins/x\n", folders)
    assert not pypi_installs_without_checkout(
        "pip install agentium-harness   # or: pip install ./core\n", folders
    )
    assert not pypi_installs_without_checkout("pip install ./core ./plugins/archive-s3\n", folders)
    assert not pypi_installs_without_checkout("pip install -e './plugins/archive-s3[test]'\n", folders)


def test_docs_install_from_a_checkout_until_a_release_exists() -> None:
    folders = _checkout_folders()
    problems = [
        f"{path.relative_to(ROOT)}:{problem}"
        for path in _documents()
        for problem in pypi_installs_without_checkout(path.read_text("utf-8"), folders)
    ]
    assert problems == [], "no release is on PyPI yet; give the checkout install:\n" + "\n".join(problems)


# ------------------------------------------------------------------ release procedure

RELEASE_TARGET = ROOT / ".github" / "scripts" / "release_target.py"
RELEASE_WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def _release_target(tag: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RELEASE_TARGET), tag], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_a_release_tag_names_its_folder_at_the_source_version(folder: Path) -> None:
    name = _pyproject(folder)["project"]["name"]
    version = Version(_source_version(folder))
    proc = _release_target(f"refs/tags/{name}-v{version}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == folder.relative_to(ROOT).as_posix()
    # A tag ahead of the source is refused: the tag can only publish what the source says.
    ahead = f"{version.major}.{version.minor}.{version.micro + 1}"
    proc = _release_target(f"{name}-v{ahead}")
    assert proc.returncode == 2 and "bump the source first" in proc.stderr


def test_a_release_tag_must_name_a_distribution() -> None:
    proc = _release_target("agentium-nope-v0.1.0")
    assert proc.returncode == 2 and "not a distribution in this repository" in proc.stderr
    proc = _release_target("v0.1.0")
    assert proc.returncode == 2 and "<distribution>-v<version>" in proc.stderr


def test_the_release_workflow_publishes_with_trusted_publishing() -> None:
    text = RELEASE_WORKFLOW.read_text("utf-8")
    assert '- "agentium-*-v*"' in text  # triggered by a distribution's tag
    assert "python .github/scripts/release_target.py" in text
    assert "python -m twine check --strict dist/*" in text
    assert "tests/test_packaging.py" in text
    # OIDC trusted publishing: the id-token permission and the PyPA action, no stored token.
    assert "id-token: write" in text and "pypa/gh-action-pypi-publish@release/v1" in text
    assert "password:" not in text and "PYPI_API_TOKEN" not in text and "secrets." not in text


# ------------------------------------------------------------------ the README's Quick start

#: What the first Quick start command pulls from PyPI besides the checkout's folders. It took
#: 9.5 s in a fresh venv on a two-core machine (the README says so); a new dependency of the
#: core or of verifier-fs must be re-measured there (it has to stay under a minute) and added here.
QUICK_START_DEPENDENCIES = {"pluggy", "attrs", "cattrs", "anyio", "sniffio", "defusedxml"}


def _quick_start() -> tuple[list[str], str]:
    text = (ROOT / "README.md").read_text("utf-8")
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()], section


def test_quick_start_says_how_long_and_what_runs() -> None:
    commands, section = _quick_start()
    assert len(commands) == 2
    assert re.search(r"first command takes well under a minute\*\* \(\d+(\.\d+)? s measured", section)
    assert re.search(r"second command takes about [a-z]+ to [a-z]+ minutes\*\*", section)
    assert "starts no server" in section  # what the first one starts
    assert "child processes listening on free loopback ports" in section  # what the second one starts


def test_quick_start_first_command_installs_only_small_dependencies() -> None:
    commands, _ = _quick_start()
    install, demo = commands[0].split(" && ")
    assert demo == "agentium demo"
    folders = re.findall(r"\s\./(\S+)", install)
    assert install.startswith("python3 -m pip install ") and folders, install
    names = {_pyproject(ROOT / f)["project"]["name"] for f in folders}
    assert "agentium-harness" in names
    pulled = {
        Requirement(d).name.lower()
        for f in folders
        for d in _pyproject(ROOT / f)["project"]["dependencies"]
        if Requirement(d).name not in names
    }
    assert pulled <= QUICK_START_DEPENDENCIES, (
        f"the first Quick start command now also installs {sorted(pulled - QUICK_START_DEPENDENCIES)}: "
        "time it in a fresh venv (it must stay under a minute), update README.md, then this list"
    )


# ------------------------------------------------------------------ the README as PyPI shows it

#: A Markdown link or image target: inline ``](target)`` or a reference definition ``[label]: target``.
LINK_TARGET = re.compile(r"\]\(\s*<?([^)\s>]+)|^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)", re.M)
#: Fenced blocks and code spans, which hold no links (a ``](`` in them is code).
CODE = re.compile(r"^```.*?^```|`[^`\n]*`", re.M | re.S)


def readme_link_problems(text: str) -> list[str]:
    """Links of a distribution's README that break on PyPI, or name a repository path that does not exist.

    PyPI shows the README alone, at ``pypi.org/project/<name>/``: a relative link
    (``../../docs/x.md``, ``tests/y.txt``, ``#section``) resolves there and finds nothing.
    """
    problems = []
    for match in LINK_TARGET.finditer(CODE.sub("", text)):
        target = match.group(1) or match.group(2)
        if not target.startswith(("https://", "http://", "mailto:")):
            problems.append(f"{target}: relative; PyPI shows the README alone, use {REPOSITORY}/blob/main/…")
            continue
        for kind in ("blob", "tree"):
            prefix = f"{REPOSITORY}/{kind}/main/"
            if target.startswith(prefix):
                path = target[len(prefix) :].split("#", 1)[0]
                if not (ROOT / path).exists():
                    problems.append(f"{target}: {path} is not in the repository")
    return problems


def test_the_readme_link_scan_catches_what_breaks_on_pypi() -> None:
    assert readme_link_problems("see [Agentium](../../README.md)")
    assert readme_link_problems("the list in [`x`](tests/x.txt):")
    assert readme_link_problems("[a]: docs/a.md\n")
    assert readme_link_problems("above, [there](#install)")
    assert readme_link_problems(f"[gone]({REPOSITORY}/blob/main/docs/no-such-file.md)")
    assert not readme_link_problems(f"[recall]({REPOSITORY}/blob/main/docs/recall.md#quality)")
    assert not readme_link_problems("[PyPI](https://pypi.org/) and `code](x)` [x] (y)")


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_the_readme_pypi_shows_has_no_relative_links(folder: Path) -> None:
    readme = folder / _pyproject(folder)["project"]["readme"]
    assert readme_link_problems(readme.read_text("utf-8")) == []
