#!/bin/bash
# bench/notes/shard-tasks.md: 5 interleaved rounds of a two-process 64 B ping-pong: both ends
# application threads, the pong a shard task (--on-shard), both ends shard tasks, raw TCP.
# LG = the loadgen binary (a
# copy outside /work/wt); run with a cwd outside the worktree, under /tmp/quiet.sh.
bin=${LG:-/tmp/lg-t26}
logs=$(mktemp -d)
row() { # NAME PONG_FLAGS PING_FLAGS
  local log=$logs/pong-$1.log addr pid j
  $bin pong --quiet $2 --listen 127.0.0.1:0 >"$log.out" 2>"$log" & pid=$!
  for j in $(seq 300); do
    addr="$(sed -n 's/.* ready: .*listen=\([^ ]*\).*/\1/p' "$log" | head -1)"
    [[ -n $addr ]] && break
    sleep 0.1
  done
  $bin ping $3 --listen 127.0.0.1:0 --static-peer "$addr" --size 64 --duration-ms 3000 \
    --warmup-ms 500 --markdown "$1"
  wait $pid
}
for i in 1 2 3 4 5; do
  if (( i % 2 )); then order="threads pong both raw"; else order="both pong threads raw"; fi
  for f in $order; do
    case $f in
      threads) row "pair$i-threads" "" "";;
      pong) row "pair$i-pong" "--on-shard" "";;
      both) row "pair$i-both" "--on-shard" "--on-shard";;
      raw) row "pair$i" "--raw" "--raw";;
    esac
  done
done
