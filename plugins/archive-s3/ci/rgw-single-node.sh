#!/bin/bash
# A throwaway single-node Ceph (Debian's Pacific 16.2 packages): one monitor, one memstore OSD and
# radosgw (beast) on 127.0.0.1 only, auth none inside the cluster, one S3 user test/test.
#
#   rgw-single-node.sh DIR     start; writes DIR/{mon,osd,rgw}.pid, DIR/rgw_port, DIR/ceph.conf
#   rgw-single-node.sh DIR rgw restart radosgw alone on the same port (the OSD keeps the data)
#
# Stop: kill the PIDs in DIR/*.pid (the test fixture does, each by its own PID).
# Adapted from the reference start script in shared/reference; derived from Ceph's vstart.sh ideas.
set -eu
D=$1
MODE=${2:-all}
fp() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

start_rgw() {
    radosgw -c "$D/ceph.conf" -n client.rgw.a -f --setuser root --setgroup root > "$D/log/rgw.out" 2>&1 &
    echo $! > "$D/rgw.pid"
    local port; port=$(cat "$D/rgw_port")
    for _ in $(seq 1 600); do
        curl -s -o /dev/null "http://127.0.0.1:$port/" && return 0
        kill -0 "$(cat "$D/rgw.pid")" 2>/dev/null || { echo "radosgw exited; see $D/log" >&2; return 1; }
        sleep 0.1
    done
    echo "radosgw did not answer on 127.0.0.1:$port within 60 s" >&2
    return 1
}

if [ "$MODE" = rgw ]; then
    start_rgw
    exit 0
fi

for tool in ceph-mon ceph-osd radosgw ceph monmaptool ceph-authtool radosgw-admin uuidgen curl; do
    command -v "$tool" > /dev/null || { echo "missing $tool: run plugins/archive-s3/ci/install-servers.sh" >&2; exit 3; }
done
mkdir -p "$D/mon" "$D/osd" "$D/run" "$D/log"
# Two separate probes can be handed the same free port (about one start in 14,000): the monitor
# would then hold radosgw's port and radosgw could not start. Probe again until they differ.
MP=$(fp); RP=$(fp)
while [ "$RP" = "$MP" ]; do RP=$(fp); done
FSID=$(uuidgen)
echo "$RP" > "$D/rgw_port"
cat > "$D/ceph.conf" <<CONF
[global]
fsid = $FSID
mon host = v2:127.0.0.1:$MP
public addr = 127.0.0.1
ms bind msgr1 = false
ms cluster mode = crc secure
ms service mode = crc secure
ms client mode = crc secure
ms mon cluster mode = crc secure
ms mon service mode = crc secure
ms mon client mode = crc secure
auth cluster required = none
auth service required = none
auth client required = none
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
osd crush chooseleaf type = 0
osd objectstore = memstore
memstore device bytes = 1073741824
run dir = $D/run
admin socket = $D/run/\$name.\$pid.asok
log file = $D/log/\$name.log
mon data = $D/mon/\$cluster-\$id
osd data = $D/osd/\$cluster-\$id
keyring = $D/keyring
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$RP tcp_nodelay=1
rgw data = $D/rgw
CONF
ceph-authtool --create-keyring "$D/keyring" --gen-key -n mon. --cap mon 'allow *' > /dev/null
monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$MP]" "$D/monmap" > /dev/null
ceph-mon -c "$D/ceph.conf" --mkfs -i a --monmap "$D/monmap" --keyring "$D/keyring"
ceph-mon -c "$D/ceph.conf" -i a -f > "$D/log/mon.out" 2>&1 &
echo $! > "$D/mon.pid"
OSDU=$(uuidgen)
OID=$(timeout 60 ceph -c "$D/ceph.conf" osd new "$OSDU")
mkdir -p "$D/osd/ceph-$OID"
ceph-osd -c "$D/ceph.conf" -i "$OID" --mkfs --osd-uuid "$OSDU" > "$D/log/osd-mkfs.out" 2>&1
ceph-osd -c "$D/ceph.conf" -i "$OID" -f > "$D/log/osd.out" 2>&1 &
echo $! > "$D/osd.pid"
start_rgw
timeout 60 radosgw-admin -c "$D/ceph.conf" -n client.rgw.a user create --uid=test --display-name=test \
    --access-key=test --secret=test > /dev/null
echo "rgw ready on 127.0.0.1:$RP"
