#!/bin/bash
# Installs what the archive-s3 tests need and is missing: Ceph's radosgw, a monitor and an OSD
# (Debian's packages) for the RGW run of the suites. moto's server comes from the plugin's `test`
# extra (pip), not from here. Idempotent: does nothing when every tool is already on PATH.
# Measured on 2 cores: about 40 s to install, about 13 s for the RGW start (see the README).
set -eu
need=()
for tool in ceph-mon ceph-osd radosgw ceph monmaptool ceph-authtool radosgw-admin uuidgen curl; do
    command -v "$tool" > /dev/null || need+=("$tool")
done
if [ ${#need[@]} -eq 0 ]; then
    echo "archive-s3: Ceph RGW tools already installed"
    exit 0
fi
echo "archive-s3: installing Debian's Ceph packages for the RGW tests (missing: ${need[*]})"
if ! command -v apt-get > /dev/null; then
    echo "archive-s3: apt-get not found; install ceph-mon ceph-osd radosgw ceph-common uuid-runtime curl" \
        "yourself, or the RGW tests fail (AGENTIUM_REQUIRE_RGW=1)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q > /dev/null
apt-get install -y -q --no-install-recommends ceph-mon ceph-osd radosgw ceph-common uuid-runtime curl > /dev/null
echo "archive-s3: Ceph RGW tools installed"
