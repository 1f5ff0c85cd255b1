"""The oldest botocore the plugin's metadata accepts knows every S3 parameter the adapters send.

pip keeps an installed boto3/botocore that satisfies the declared bounds, and
botocore refuses a parameter its bundled S3 model lacks before any request
("Unknown parameter in input: IfMatch"). ``boto3>=1.35`` once accepted
botocore 1.35.0, whose model has neither ``IfNoneMatch`` nor ``IfMatch`` on
``PutObject``: every append and every snapshot save failed. The test installs
exactly the declared lower bounds from PyPI (no dependencies, into a folder of
its own) and validates, with botocore's own parameter validator, one call of
each shape the adapters make.
"""

from __future__ import annotations

import json
from pathlib import Path

from packaging.version import Version

from agentium_harness.testing.floors import declared_floors, install_floors, run_python

PLUGIN = Path(__file__).resolve().parents[1]

#: One call of each shape the adapters and the probe make: (operation, parameters).
CALLS: list[tuple[str, dict[str, object]]] = [
    # archive.py: a group is created once, with its checksum.
    (
        "PutObject",
        {
            "Bucket": "b",
            "Key": "k",
            "Body": b"x",
            "IfNoneMatch": "*",
            "ChecksumSHA256": "x",
            "ContentType": "application/json",
            "Metadata": {"a": "b"},
        },
    ),
    # sessions.py: a snapshot is replaced only over the revision it read.
    ("PutObject", {"Bucket": "b", "Key": "k", "Body": b"x", "IfMatch": '"etag"'}),
    ("PutObject", {"Bucket": "b", "Key": "k", "Body": b"x", "ContentMD5": "x"}),
    ("GetObject", {"Bucket": "b", "Key": "k", "Range": "bytes=0-1", "VersionId": "v"}),
    ("HeadObject", {"Bucket": "b", "Key": "k"}),
    ("HeadBucket", {"Bucket": "b"}),
    ("GetBucketVersioning", {"Bucket": "b"}),
    ("ListObjectsV2", {"Bucket": "b", "Prefix": "p/", "MaxKeys": 10}),
    ("ListObjectVersions", {"Bucket": "b", "Prefix": "p/"}),
    ("DeleteObject", {"Bucket": "b", "Key": "k", "VersionId": "v"}),
    ("DeleteObjects", {"Bucket": "b", "Delete": {"Objects": [{"Key": "k"}], "Quiet": True}}),
]

CHECK = """
import json, sys
import botocore, botocore.session
from botocore.validate import ParamValidator
model = botocore.session.get_session().get_service_model("s3")
problems = []
for op, params in json.loads(sys.argv[1]):
    for key, value in params.items():
        if value == "__bytes__":
            params[key] = b"x"
    report = ParamValidator().validate(params, model.operation_model(op).input_shape)
    if report.has_errors():
        problems.append(f"{op}: {report.generate_report()}")
print(json.dumps({"version": botocore.__version__, "problems": problems}))
"""


def _floors() -> dict[str, str]:
    return declared_floors(PLUGIN / "pyproject.toml")


def test_botocore_is_declared_as_it_is_imported() -> None:
    # The adapters import botocore.exceptions themselves: its bound is theirs to state.
    assert {"boto3", "botocore"} <= set(_floors())


def test_the_lowest_accepted_botocore_takes_every_call(tmp_path: Path) -> None:
    floors = _floors()
    # boto3 a.b.c requires botocore >= a.b.c (they are released in step), so the lowest botocore
    # pip may pair with the plugin is the higher of the two floors.
    lowest = str(max(Version(floors["boto3"]), Version(floors.get("botocore", "0"))))
    site = tmp_path / "site"
    install_floors(site, f"botocore=={lowest}")
    calls = [
        (op, {k: ("__bytes__" if isinstance(v, bytes) else v) for k, v in params.items()})
        for op, params in CALLS
    ]
    # On the floor alone: no site-packages, so no newer botocore can stand in.
    result = json.loads(run_python(CHECK, json.dumps(calls), isolated=site, timeout=120))
    assert Version(result["version"]) == Version(lowest)
    assert result["problems"] == [], (
        f"botocore {result['version']} (the declared floor) refuses calls the adapters make"
    )
