#!/usr/bin/env bash
# Compares --sync step and --sync diloco on test hosts behind slow links:
# N network namespaces (one troupe agent each), each linked by a veth pair
# to a router namespace. Every host's link is limited to RATE each way by
# tc's tbf on both ends of its veth, and every packet the router forwards
# passes through a delay line (package internal/netemu: a TUN device in the
# router, the router's policy routing sending forwarded packets into it)
# that holds it DELAY: a host-to-host path of RATE with DELAY one way. (The
# delay line stands in for tc netem, which this project's kernels lack.)
# Everything lives in namespaces this script creates (addresses
# 10.77.0.0/16 exist only inside them) and is removed on exit, also on
# failure or Ctrl-C. Needs root (ip netns, tc) and a troupe binary.
#
#   scripts/netns-sync-bench.sh [-n 2] [--rate 50mbit] [--delay 20ms] \
#     [--bin troupe] [--delayline BIN] [--out DIR] [--modes "step diloco"] \
#     [--deadline SECONDS] -- [train flags…]
#
# Each mode's agents write DIR/MODE-nI.jsonl (the leader's steps, with the
# held-out loss at every --eval-every) and DIR/MODE-nI.json (the agent's
# summary); DIR/summary.json has, per mode, the tokens per second over the
# steps' time (the sum of step_ms: evaluations excluded), the bytes sent to
# other replicas and the held-out losses. Diloco runs with --sync-every
# $SYNC_EVERY (default 20) and --outer-nesterov. Every agent is bounded by
# --deadline seconds.
set -euo pipefail

n=2 rate=50mbit delay=20ms bin=troupe delayline= out=netns-sync-bench modes="step diloco" deadline=900
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --delayline) delayline=$2; shift 2 ;;
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
case "$n" in ''|*[!0-9]*) n=0 ;; esac
[ "$n" -ge 2 ] && [ "$n" -le 8 ] || { echo "netns-sync-bench: -n: want 2 to 8 hosts" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ -z "$delayline" ]; then
  delayline="$out/delayline"
  (cd "$(dirname "$0")/.." && go build -o "$delayline" ./internal/netemu/cmd/delayline)
fi

tag=tsb$$
router=$tag-r
hosts=()
cleanup() {
  for h in "${hosts[@]}" "$router"; do
    ip netns pids "$h" 2>/dev/null | xargs -r kill 2>/dev/null || true
  done
  sleep 0.2
  for h in "${hosts[@]}" "$router"; do
    ip netns pids "$h" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$h" 2>/dev/null || true
  done
}
trap cleanup EXIT INT TERM

shape() { # shape NS DEV: RATE out of DEV, queueing up to a second
  ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst 64kb latency 1s
}
ip netns add "$router"
ip netns exec "$router" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
ip -n "$router" link set lo up
ip -n "$router" tuntap add dev tun0 mode tun
ip -n "$router" link set tun0 up
ip -n "$router" route add default dev tun0 table 100
for i in $(seq 1 "$n"); do
  h=$tag-h$i
  ip netns add "$h"
  hosts+=("$h")
  ip -n "$router" link add "r$i" type veth peer name eth0 netns "$h"
  ip -n "$router" addr add "10.77.$i.1/24" dev "r$i"
  ip -n "$router" link set "r$i" up
  ip -n "$router" rule add iif "r$i" table 100 # forwarded packets go through the delay line
  ip -n "$h" addr add "10.77.$i.2/24" dev eth0
  ip -n "$h" link set eth0 up
  ip -n "$h" link set lo up
  ip -n "$h" route add default via "10.77.$i.1"
  shape "$h" eth0
  shape "$router" "r$i"
done
ip netns exec "$router" "$delayline" --dev tun0 --delay "$delay" 2>"$out/delayline.log" &
disown
join=$(for i in $(seq 1 "$n"); do printf '10.77.%d.2:7101,' "$i"; done)
join=${join%,}
# The link as measured: one round trip and 8 MB from host 1 to host 2.
cat >"$out/linkprobe.py" <<'PY'
import socket, sys, time
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "serve":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((host, port)); s.listen(1)
    s.settimeout(30); c, _ = s.accept(); c.settimeout(60)
    c.sendall(c.recv(1))
    n = 0
    while True:
        b = c.recv(1 << 16)
        if not b: break
        n += len(b)
    c.sendall(str(n).encode()); c.close()
else:
    size = 8000000
    for _ in range(100):
        try:
            c = socket.create_connection((host, port), timeout=30); break
        except OSError:
            time.sleep(0.1)
    t0 = time.time(); c.sendall(b"x"); c.recv(1); rtt = time.time() - t0
    t0 = time.time(); c.sendall(b"\0" * size); c.shutdown(socket.SHUT_WR); got = int(c.recv(64)); el = time.time() - t0
    print('{"rtt_ms": %.1f, "mbit_per_s": %.1f, "bytes": %d}' % (rtt * 1e3, got * 8 / el / 1e6, got))
PY
ip netns exec "$tag-h2" python3 "$out/linkprobe.py" serve 10.77.2.2 7999 &
ip netns exec "$tag-h1" python3 "$out/linkprobe.py" send 10.77.2.2 7999 >"$out/link.json" ||
  { echo "netns-sync-bench: hosts 1 and 2 cannot reach each other" >&2; exit 1; }
wait $!
echo "netns-sync-bench: $n hosts, links of $rate with $delay one way; measured $(cat "$out/link.json")" >&2

for mode in $modes; do
  flags=(--sync "$mode")
  [ "$mode" = step ] || flags+=(--sync-every "${SYNC_EVERY:-20}" --outer-nesterov)
  pids=()
  for i in $(seq 1 "$n"); do
    ip netns exec "$tag-h$i" timeout "$deadline" "$bin" agent --name "n$i" --listen "10.77.$i.2:7101" --join "$join" \
      --min-nodes "$n" --max-nodes "$n" --key "passphrase:netns-sync-bench" --log-format json --timings lan \
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
