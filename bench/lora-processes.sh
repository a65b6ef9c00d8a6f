#!/usr/bin/env bash
# lora-processes.sh — LoRA adapters on real processes: SERVERS simserver processes (Qwen3-32B on
# 2×H100 in real time) each serving the bench LoRA workload's 64 adapters with MAX_LORAS slots
# and LOAD_COST per adapter load, behind the gateway, which learns the adapters from each
# server's GET /v1/models and their running and waiting adapters from vllm:lora_requests_info;
# loadgen replays the bench's lora workload (Zipf-popular adapters, the adapter as the request's
# model). One markdown row per router — usher (the gateway's default, with its adapter term)
# and usher-adapter-blind (the same blend without it, bench/profiles) — the median of REPEAT
# runs and their range. See bench/README.md, "LoRA adapters".
#
#   bash bench/lora-processes.sh
#   REQUESTS=600 REPEAT=1 LOAD_COST=100ms bash bench/lora-processes.sh
#
# Environment: SERVERS, MAX_LORAS, LOAD_COST, REQUESTS, SPEED (the workload's 24 requests/s
# times SPEED), SEED, REPEAT, ROUTERS, OUT (directory for the reports).
set -euo pipefail
cd "$(dirname "$0")/.."

SERVERS=${SERVERS:-4}
MAX_LORAS=${MAX_LORAS:-4}
LOAD_COST=${LOAD_COST:-50ms}
REQUESTS=${REQUESTS:-1200}
SPEED=${SPEED:-0.5}
SEED=${SEED:-1}
REPEAT=${REPEAT:-3}
ROUTERS=${ROUTERS:-usher usher-adapter-blind}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

. bench/procs.sh # started, build_tools
build_tools

adapters=$(python3 -c 'print(",".join(f"lora-{k}" for k in range(64)))')


run() ( # ROUTER N
	trap 'pkill -P $BASHPID 2>/dev/null || true' EXIT
	local router=$1 tag=$1-$2 backends=() urls=()
	for i in $(seq "$SERVERS"); do
		"$bin/simserver" -listen 127.0.0.1:0 -profile qwen3-32b-h100 -lora-modules "$adapters" \
			-max-loras "$MAX_LORAS" -lora-load-cost "$LOAD_COST" </dev/null >"$OUT/sim-$tag-$i.log" 2>&1 &
		urls+=("$(started simserver "$OUT/sim-$tag-$i.log")")
		backends+=(-backend "${urls[-1]}")
	done
	local routing=(-router "$router")
	[ -f "bench/profiles/$router.json" ] && routing=(-config "bench/profiles/$router.json")
	"$bin/gateway" -listen 127.0.0.1:0 "${routing[@]}" -policy fcfs -max-inflight $((32 * SERVERS)) \
		-scrape-interval 50ms -tokenizer endpoint "${backends[@]}" </dev/null >"$OUT/gateway-$tag.log" 2>&1 &
	gw=$(started "usher gateway" "$OUT/gateway-$tag.log")
	"$bin/loadgen" -url "$gw" -workload lora -seed "$SEED" -limit "$REQUESTS" -speed "$SPEED" -duration 0 \
		-max-context -1 -quiet -json -label "$router" >"$OUT/process-$tag.json"
	for u in "${urls[@]}"; do
		curl -s "$u/metrics" | grep -E '^(simfleet:lora_loads_total|vllm:e2e_request_latency_seconds_sum)' |
			sed "s|^|$u |" >>"$OUT/metrics-$tag.txt"
	done
)

for n in $(seq "$REPEAT"); do
	for router in $ROUTERS; do
		run "$router" "$n"
	done
done

python3 - "$OUT" $ROUTERS <<'PY'
import glob, json, re, statistics, sys
out, routers = sys.argv[1], sys.argv[2:]
print("| router | TTFT p50 | TTFT p99 | adapter loads/min | max/mean load | errors |")
print("|---|---|---|---|---|---|")
for r in routers:
    runs = []
    for f in sorted(glob.glob(f"{out}/process-{r}-*.json")):
        if not re.fullmatch(rf"process-{re.escape(r)}-\d+\.json", f.rsplit("/", 1)[-1]):
            continue  # another router's whose name starts with this one's
        p = json.load(open(f))
        loads, e2e = 0.0, {}
        for line in open(f.replace("process-", "metrics-").replace(".json", ".txt")):
            url, name, value = line.split()[0], line.split()[1].split("{")[0], float(line.split()[2])
            if name == "simfleet:lora_loads_total":
                loads += value
            else:
                e2e[url] = e2e.get(url, 0) + value
        minutes = p["seconds"] / 60 if p.get("seconds") else 1
        busy = list(e2e.values())
        runs.append((p["ttft"]["p50_ms"], p["ttft"]["p99_ms"], loads / minutes,
                     max(busy) / (sum(busy) / len(busy)) if busy and sum(busy) else 0, p["errors"]))
    if not runs:
        continue
    def cell(i, fmt):
        vs = [x[i] for x in runs]
        return (fmt % statistics.median(vs)) + (" (" + fmt % min(vs) + "–" + fmt % max(vs) + ")" if len(vs) > 1 else "")
    print(f"| {r} | {cell(0, '%.0f ms')} | {cell(1, '%.0f ms')} | {cell(2, '%.0f')} | {cell(3, '%.2f')} | {cell(4, '%d')} |")
PY
