#!/usr/bin/env bash
# ab.sh N TAG BIN...: one storm per binary, in order; JSON to TAG-N-i-BIN.json, stderr beside it.
n=$1; tag=$2; shift 2; i=0
for b in "$@"; do
  i=$((i+1))
  RUST_LOG=warn,shoal_proto::shard::links=info timeout 600 ./$b storm --nodes $n --idle-ms 10000 \
    --converge-timeout-ms 30000 --json > $tag-$n-$i-$b.json 2> $tag-$n-$i-$b.err
  echo "$(date +%T) $b rc=$? hb=$(grep -c 'heartbeat timeout' $tag-$n-$i-$b.err)"
done
