#!/usr/bin/env bash
# Start an elastic troupe job of N agents on loopback and wait for it.
#
#   scripts/local-cluster.sh 3                    # 3 agents, the default GPT
#   scripts/local-cluster.sh 4 --model mlp --layers 784,256,10 --data mnist --steps 2000
#
# Extra arguments are training flags every agent gets. Logs and metrics go to
# $TROUPE_CLUSTER_DIR (default ./troupe-cluster). Grow the job from another
# shell with the same --join list (the command is printed), shrink it with
# kill -TERM on an agent's pid, or kill -9 one to watch the others recover.
set -euo pipefail
n=${1:-3}
shift || true
dir=${TROUPE_CLUSTER_DIR:-troupe-cluster}
mkdir -p "$dir"
bin=${TROUPE_BIN:-$dir/troupe}
if [ ! -x "$bin" ]; then
  go build -o "$bin" ./cmd/troupe
fi
key=${TROUPE_CLUSTER_KEY:-passphrase:local-cluster-$(date +%s)}
export TROUPE_CLUSTER_KEY=$key
base=${TROUPE_BASE_PORT:-7100}
join=""
for i in $(seq 1 "$n"); do join="$join${join:+,}127.0.0.1:$((base + i))"; done
min=$(( n / 2 + 1 ))
pids=()
for i in $(seq 1 "$n"); do
  "$bin" agent --name "n$i" --listen "127.0.0.1:$((base + i))" --join "$join" --min-nodes "$min" \
    --metrics-out "$dir/n$i.jsonl" "$@" >"$dir/n$i.json" 2>"$dir/n$i.log" &
  pids+=($!)
  echo "n$i: pid $! gossip 127.0.0.1:$((base + i)), log $dir/n$i.log"
done
echo "join another: TROUPE_CLUSTER_KEY=$key $bin agent --name n$((n + 1)) --listen 127.0.0.1:$((base + n + 1)) --join $join --min-nodes $min $*"
trap 'kill "${pids[@]}" 2>/dev/null || true' INT TERM
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
cat "$dir"/n*.json 2>/dev/null || true
exit $status
