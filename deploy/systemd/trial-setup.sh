#!/bin/sh
# The files of a one-machine trial, where deploy/systemd's units read them: the coordinator's
# (trial certificates for 127.0.0.1, the roster, the trial run) and each organisation's own
# (its Cora shard, identity key, the roster, the coordinator's CA, its policy).
#   deploy/systemd/trial-setup.sh [CONFIG_DIR]     (default: ~/.config/fedgl, the units' %E/fedgl)
# Needs fedgl on PATH and the Cora files under $FEDGL_DATA. In a real federation each
# organisation makes its own key and shard (docs/deployment.md) and nobody holds them all.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
conf=${1:-${XDG_CONFIG_HOME:-$HOME/.config}/fedgl}
umask 077
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fedgl keys --clients 3 --out "$work/keys"
fedgl shard --dataset cora --clients 3 --out "$work/shards"
mkdir -p "$conf/coordinator/runs"
fedgl certs --host 127.0.0.1 --out "$conf/coordinator"
cp "$work/keys/roster.json" "$conf/coordinator/"
cp "$here/trial.yaml" "$conf/coordinator/runs/trial.yaml"
for k in 0 1 2; do
    mkdir -p "$conf/client-$k"
    cp "$work/shards/client-$k.json" "$work/shards/client-$k.npz" "$work/keys/client-$k.key" \
        "$work/keys/roster.json" "$conf/coordinator/ca.pem" "$here/policy.yaml" "$conf/client-$k/"
done
[ -f "$conf/fedgl.env" ] || cp "$here/fedgl.env" "$conf/fedgl.env"
echo "trial files in $conf"
