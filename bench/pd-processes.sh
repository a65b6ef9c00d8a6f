#!/usr/bin/env bash
# pd-processes.sh — disaggregated prefill/decode on real processes: the gateway example on its
# embedded simulated fleet (four Qwen3-32B-on-2×H100 servers in real time, KV events followed),
# driven by loadgen's synthetic agentic sessions, once aggregated (four servers serving both)
# and once per decider with two prefill and two decode servers; the servers pull the KV from
# each other over loopback (simfleet's side channel, 5.2 µs per token plus 1 ms). One markdown
# row per mode: the median of REPEAT runs and their range, with the share of requests meeting both
# targets of bench's two goals (tight: TTFT ≤ 1 s and TPOT ≤ 25 ms; relaxed: 3 s and 50 ms). See bench/README.md, "Disaggregated
# prefill and decode".
#
#   bash bench/pd-processes.sh
#   RATE=2 REPEAT=1 MODES="agg always" bash bench/pd-processes.sh
#
# Environment: RATE (sessions starting per second), DURATION (how long sessions start),
# SYSTEM_TOKENS (the agents' shared opening), REPEAT (runs per mode), MODES (agg, always, prefix,
# busy: the prefix decider with busy_decodes 4, pool: the pool decider), OUT (directory for the
# reports), PORT.
set -euo pipefail
cd "$(dirname "$0")/.."

RATE=${RATE:-1.5}
DURATION=${DURATION:-60s}
SYSTEM_TOKENS=${SYSTEM_TOKENS:-4000}
REPEAT=${REPEAT:-3}
MODES=${MODES:-agg always prefix busy}
OUT=${OUT:-$(mktemp -d)}
PORT=${PORT:-18090}

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/gateway" ./examples/gateway
go build -o "$bin/loadgen" ./examples/loadgen
mkdir -p "$OUT"

run() { # name, gateway flags...
	local name=$1
	shift
	"$bin/gateway" -listen "127.0.0.1:$PORT" -sim-servers 4 -sim-profile qwen3-32b-h100 "$@" >"$OUT/$name.gw.log" 2>&1 &
	local gw=$!
	for _ in $(seq 100); do
		curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
		sleep 0.2
	done
	"$bin/loadgen" -url "http://127.0.0.1:$PORT" -rate "$RATE" -duration "$DURATION" -system-tokens "$SYSTEM_TOKENS" \
		-session-context 16000 -min-answer 64 -max-answer 256 -quiet -json -label "$name" >"$OUT/$name.json"
	curl -s "http://127.0.0.1:$PORT/metrics" | grep '^usher_pd_requests_total' >"$OUT/$name.metrics" || true
	kill "$gw"
	wait "$gw" 2>/dev/null || true
}

for rep in $(seq "$REPEAT"); do
	for mode in $MODES; do
		case $mode in
		agg) run "$mode-$rep" ;;
		always) run "$mode-$rep" -sim-prefill 2 -decider always ;;
		prefix) run "$mode-$rep" -sim-prefill 2 -decider prefix ;;
		busy) run "$mode-$rep" -sim-prefill 2 -decider prefix -decider-params '{"busy_decodes":4}' ;;
		pool) run "$mode-$rep" -sim-prefill 2 -decider pool ;;
		*) echo "unknown mode $mode" >&2; exit 2 ;;
		esac
	done
done

python3 - "$OUT" $MODES <<'EOF'
import json, re, statistics, sys
out, modes = sys.argv[1], sys.argv[2:]
print("| mode | TTFT p50 | TTFT p99 | inter-token p50 | inter-token p99 | cached | disaggregated | tight: TTFT ≤ 1 s, TPOT ≤ 25 ms | relaxed: TTFT ≤ 3 s, TPOT ≤ 50 ms |")
print("|---|---|---|---|---|---|---|---|---|")
import glob
for m in modes:
    runs = []
    for f in sorted(glob.glob(f"{out}/{m}-*.json")):
        d = json.load(open(f))
        met = open(f[:-5] + ".metrics").read()
        dis = sum(float(v) for v in re.findall(r'decision="disaggregated"\} (\S+)', met))
        tot = sum(float(v) for v in re.findall(r'decision="\w+"\} (\S+)', met))
        goals = {g["name"]: g["share"] for g in d.get("goals") or []}
        runs.append((d["ttft"]["p50_ms"], d["ttft"]["p99_ms"], d["inter_token"]["p50_ms"], d["inter_token"]["p99_ms"],
                     d["prefix_hit_rate"], dis / tot if tot else 0.0, d["errors"], goals.get("tight", 0.0), goals.get("relaxed", 0.0)))
    if not runs:
        continue
    def cell(i, fmt):
        vs = [r[i] for r in runs]
        return (fmt % statistics.median(vs)) + (" (" + fmt % min(vs) + "–" + fmt % max(vs) + ")" if len(vs) > 1 else "")
    print(f"| {m} | {cell(0, '%.0f ms')} | {cell(1, '%.0f ms')} | {cell(2, '%.1f ms')} | {cell(3, '%.1f ms')} | {cell(4, '%.3f')} | {cell(5, '%.2f')} | {cell(7, '%.3f')} | {cell(8, '%.3f')} |")
    if any(r[6] for r in runs):
        print(f"errors in {m}: {[r[6] for r in runs]}", file=sys.stderr)
EOF
