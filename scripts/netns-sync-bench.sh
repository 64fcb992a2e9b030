#!/usr/bin/env bash
# Compares --sync step and --sync diloco on test hosts behind slow links:
# N network namespaces (one troupe agent each), each with a veth to a bridge
# in a hub namespace, every host's egress shaped by tc netem to RATE with
# DELAY. Everything lives in namespaces this script creates (addresses
# 10.77.0.0/24 exist only inside them) and is removed on exit, also on
# failure or Ctrl-C. Needs root (ip netns, tc) and a troupe binary.
#
#   scripts/netns-sync-bench.sh [-n 2] [--rate 50mbit] [--delay 20ms] \
#     [--bin troupe] [--out DIR] [--modes "step diloco"] -- [train flags…]
#
# Each mode's agents write DIR/MODE-nI.jsonl (the leader's steps, with the
# held-out loss at every --eval-every) and DIR/MODE-nI.json (the agent's
# summary); DIR/summary.json has, per mode, the tokens per second over the
# steps' time (the sum of step_ms: evaluations excluded) and the last
# held-out loss. Every run is bounded by --deadline seconds.
set -euo pipefail

n=2 rate=50mbit delay=20ms bin=troupe out=netns-sync-bench modes="step diloco" deadline=900
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --deadline) deadline=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "netns-sync-bench: unknown option $1" >&2; exit 2 ;;
  esac
done
train=("$@")
[ "$(id -u)" -eq 0 ] || { echo "netns-sync-bench: needs root (ip netns, tc)" >&2; exit 2; }
command -v "$bin" >/dev/null || { echo "netns-sync-bench: no troupe binary at $bin (--bin)" >&2; exit 2; }
bin=$(command -v "$bin")
case "$n" in ''|*[!0-9]*) echo "netns-sync-bench: -n $n: want 2 to 8 hosts" >&2; exit 2 ;; esac
[ "$n" -ge 2 ] && [ "$n" -le 8 ] || { echo "netns-sync-bench: -n $n: want 2 to 8 hosts" >&2; exit 2; }
mkdir -p "$out"

tag=tsb$$
hub=$tag-hub
hosts=()
cleanup() {
  for h in "${hosts[@]}"; do ip netns pids "$h" 2>/dev/null | xargs -r kill -9 2>/dev/null || true; done
  for h in "${hosts[@]}" "$hub"; do ip netns del "$h" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

ip netns add "$hub"
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
for i in $(seq 1 "$n"); do
  h=$tag-h$i
  ip netns add "$h"
  hosts+=("$h")
  ip -n "$hub" link add "v$i" type veth peer name eth0 netns "$h"
  ip -n "$hub" link set "v$i" master br0 up
  ip -n "$h" addr add "10.77.0.$i/24" dev eth0
  ip -n "$h" link set eth0 up
  ip -n "$h" link set lo up
  # The host's link: what it sends waits DELAY and leaves at RATE.
  ip netns exec "$h" tc qdisc add dev eth0 root netem delay "$delay" rate "$rate"
done
join=$(for i in $(seq 1 "$n"); do printf '10.77.0.%d:7101,' "$i"; done)
join=${join%,}
ip netns exec "$tag-h1" ping -c 1 -W 2 10.77.0.2 >/dev/null || { echo "netns-sync-bench: hosts cannot reach each other" >&2; exit 1; }
echo "netns-sync-bench: $n hosts on 10.77.0.0/24, each link $rate with $delay delay" >&2

for mode in $modes; do
  flags=(--sync "$mode")
  [ "$mode" = step ] || flags+=(--sync-every "${SYNC_EVERY:-20}" --outer-nesterov)
  pids=()
  for i in $(seq 1 "$n"); do
    ip netns exec "$tag-h$i" timeout "$deadline" "$bin" agent --name "n$i" --listen "10.77.0.$i:7101" --join "$join" \
      --min-nodes "$n" --max-nodes "$n" --key "passphrase:netns-sync-bench" --log-format json \
      --metrics-out "$out/$mode-n$i.jsonl" "${flags[@]}" "${train[@]}" \
      >"$out/$mode-n$i.json" 2>"$out/$mode-n$i.log" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p" || { echo "netns-sync-bench: an agent of $mode failed; see $out/$mode-n*.log" >&2; exit 1; }
  done
  echo "netns-sync-bench: $mode done" >&2
done

# One summary per mode from the leaders' metrics (each leader logs the
# steps it drove; without faults that is n1).
for mode in $modes; do
  cat "$out/$mode"-n*.jsonl | jq -s --arg mode "$mode" '
    (map(select(.step_ms != null)) | unique_by(.step)) as $s |
    ($s | map(.batch * (.tokens_per_s / .samples_per_s)) | add) as $tokens |
    ($s | map(.step_ms) | add / 1000) as $secs |
    ($s | map(select((.eval_loss // 0) > 0) | {step, eval_loss})) as $eval |
    {($mode): {steps: ($s | length), tokens: $tokens, step_s: $secs, tokens_per_s: ($tokens / $secs),
               sync_bytes: ($s | map(.sync_bytes) | add), final_eval_loss: ($eval | last | .eval_loss), eval: $eval}}' \
    >"$out/$mode.summary.json"
done
jq -s add "$out"/*.summary.json >"$out/summary.json"
cat "$out/summary.json"
