#!/usr/bin/env bash
# calibrate.sh — the same workload through the bench simulator and through real processes
# (simserver model servers behind the gateway, driven by loadgen -workload), one row per router
# with both sides' figures and the simulator's error. The first step of the calibration the
# placement issue asks for; see bench/README.md.
#
#   bash bench/calibrate.sh                      # agentic, 300 requests, 4 servers, usher llm-d round-robin
#   WORKLOAD=prefix-group REQUESTS=400 ROUTERS="usher llm-d" bash bench/calibrate.sh
#
# Environment: WORKLOAD (a bench workload name), SEED, REQUESTS, RATE (arrivals of sessions
# RATE times as fast, think times unchanged, as compare -rate), SERVERS, KV_BLOCKS (per server,
# of 64 tokens), ROUTERS, OUT (directory for the runs' reports). The servers are the
# simulator's (bench.BenchProfile): Qwen3-32B on 2×H100, 64-token blocks, a 131,072-token
# context, so that no prompt is cut on one side only.
set -euo pipefail
cd "$(dirname "$0")/.."

WORKLOAD=${WORKLOAD:-agentic}
SEED=${SEED:-1}
REQUESTS=${REQUESTS:-300}
RATE=${RATE:-1}
SERVERS=${SERVERS:-4}
KV_BLOCKS=${KV_BLOCKS:-4500}
ROUTERS=${ROUTERS:-usher llm-d round-robin}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

bin=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$bin"' EXIT
go build -o "$bin/simserver" ./examples/simfleet/cmd/simserver
go build -o "$bin/gateway" ./examples/gateway
go build -o "$bin/loadgen" ./examples/loadgen

engine=(-profile qwen3-32b-h100 -block-size 64 -kv-blocks "$KV_BLOCKS" -max-model-len 131072)

# started LINE_PREFIX LOGFILE: waits for a process's "listening on http://..." line, prints the URL.
started() {
	for _ in $(seq 100); do
		url=$(grep -o "$1 listening on http://[0-9.:]*" "$2" 2>/dev/null | grep -o 'http://[0-9.:]*' || true)
		[ -n "$url" ] && { echo "$url"; return; }
		sleep 0.1
	done
	echo "no '$1 listening' line in $2" >&2
	cat "$2" >&2
	exit 1
}

for router in $ROUTERS; do
	backends=()
	for i in $(seq "$SERVERS"); do
		"$bin/simserver" -listen 127.0.0.1:0 "${engine[@]}" </dev/null >"$OUT/sim-$router-$i.log" 2>&1 &
		backends+=(-backend "$(started simserver "$OUT/sim-$router-$i.log")")
	done
	"$bin/gateway" -listen 127.0.0.1:0 -router "$router" -tokenizer endpoint -block-size 64 "${backends[@]}" \
		</dev/null >"$OUT/gateway-$router.log" 2>&1 &
	gw=$(started "usher gateway" "$OUT/gateway-$router.log")
	"$bin/loadgen" -url "$gw" -workload "$WORKLOAD" -seed "$SEED" -limit "$REQUESTS" -speed "$RATE" -duration 0 -max-context -1 -quiet -json \
		-label "$router" >"$OUT/process-$router.json"
	pkill -P $$ 2>/dev/null || true
	wait 2>/dev/null || true
	go run ./bench/cmd/compare -workload "$WORKLOAD" -seed "$SEED" -seeds 1 -requests "$REQUESTS" -rate "$RATE" \
		-servers "$SERVERS" -kv-blocks "$KV_BLOCKS" -policies fcfs -routers "$router" -goal=false >"$OUT/sim-$router.md"
done

python3 - "$OUT" $ROUTERS <<'PY'
import json, re, sys
out, routers = sys.argv[1], sys.argv[2:]
def secs(s):
    s = s.strip().split(" ")[0]
    return float(s[:-2]) / 1000 if s.endswith("ms") else float(s[:-1]) if s.endswith("s") else float(s)
print("| router | side | TTFT p50 | TTFT p90 | TTFT p99 | cached share |")
print("|---|---|---:|---:|---:|---:|")
for r in routers:
    p = json.load(open(f"{out}/process-{r}.json"))
    proc = [p["ttft"]["p50_ms"] / 1000, p["ttft"]["p90_ms"] / 1000, p["ttft"]["p99_ms"] / 1000, p["prefix_hit_rate"]]
    row = None
    for line in open(f"{out}/sim-{r}.md"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 10 and cells[1] == r and "performance" not in line:
            row = cells
            break
    if row is None:
        print(f"| {r} | (no simulator row) | | | | |")
        continue
    sim = [secs(row[4]), secs(row[5]), secs(row[6]), float(row[9].split(" ")[0].rstrip("%")) / 100]
    print(f"| {r} | processes | {proc[0]:.3f}s | {proc[1]:.3f}s | {proc[2]:.3f}s | {proc[3]:.3f} |")
    print(f"| {r} | simulator | {sim[0]:.3f}s | {sim[1]:.3f}s | {sim[2]:.3f}s | {sim[3]:.3f} |")
    err = [f"{(s - q) / q:+.0%}" if q else "n/a" for s, q in zip(sim[:3], proc[:3])] + [f"{sim[3] - proc[3]:+.3f}"]
    print(f"| {r} | error | {err[0]} | {err[1]} | {err[2]} | {err[3]} |")
PY
echo "reports in $OUT"
