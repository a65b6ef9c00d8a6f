#!/usr/bin/env bash
# calibrate.sh — the same workload through the bench simulator and through real processes
# (simserver model servers behind the gateway, driven by loadgen -workload), one row per router
# with both sides' figures and the simulator's error. The calibration the placement issue asks
# for; see bench/README.md, "Calibration".
#
#   bash bench/calibrate.sh                      # agentic, 120 requests, 4 servers, usher llm-d round-robin
#   WORKLOAD=forks REQUESTS=400 KV_BLOCKS=1000 REPEAT=3 PARALLEL=3 bash bench/calibrate.sh
#
# Environment: WORKLOAD (a bench workload name), SEED, REQUESTS, RATE (arrivals of sessions
# RATE times as fast, think times unchanged, as compare -rate), SERVERS, KV_BLOCKS (per server,
# of 64 tokens), ROUTERS (the gateway's profile names, or a bench variant with a configuration
# in bench/profiles, such as usher-balance-first), REPEAT (process runs per router: the table gives their median and
# min–max), PARALLEL (process runs at once; each is a gateway and SERVERS servers on loopback),
# FRONTEND_PER_TOKEN (below), OUT (directory for the runs' reports), REUSE (set: no process
# runs, the table from the reports already in OUT — to try the simulator with another
# FRONTEND_PER_TOKEN).
#
# Both sides are configured alike: the servers are the simulator's (bench.BenchProfile:
# Qwen3-32B on 2×H100, 64-token blocks, a 131,072-token context, so that no prompt is cut on
# one side only), and the gateway runs the simulator's admission (FCFS, 32 requests in flight
# per server) and scrape interval (50 ms) and tokenizes through the servers, as the simulator's
# router sees token blocks.
#
# Columns: TTFT percentiles from arrival at the gateway; cached share of prompt tokens, overall
# and of first and later turns; max/mean load, the busiest server's time-averaged requests over
# the mean (processes: each server's summed request latency over the run, by Little's law);
# gw ms, the processes' mean TTFT at the client minus the servers' own (the gateway, tokenizing
# and loopback HTTP, the server's parsing and tokenizing). The simulator is given that cost as
# its front end (compare -frontend-per-token: the median over the runs of gw ms over the mean
# prompt), unless FRONTEND_PER_TOKEN sets it (0s: none, the simulator's default).
set -euo pipefail
cd "$(dirname "$0")/.."

WORKLOAD=${WORKLOAD:-agentic}
SEED=${SEED:-1}
REQUESTS=${REQUESTS:-120}
RATE=${RATE:-1}
SERVERS=${SERVERS:-4}
KV_BLOCKS=${KV_BLOCKS:-4500}
ROUTERS=${ROUTERS:-usher llm-d round-robin}
REPEAT=${REPEAT:-1}
PARALLEL=${PARALLEL:-1}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

. bench/procs.sh # started, build_tools
build_tools ./bench/cmd/compare

engine=(-profile qwen3-32b-h100 -block-size 64 -kv-blocks "$KV_BLOCKS" -max-model-len 131072)


# run ROUTER N: one process run, its report in $OUT/process-ROUTER-N.json and the servers'
# metrics in $OUT/metrics-ROUTER-N.txt. It runs in a subshell of its own, so that killing its
# children leaves the other runs alone.
run() (
	trap 'pkill -P $BASHPID 2>/dev/null || true' EXIT
	local router=$1 n=$2 tag=$1-$2 backends=() urls=()
	for i in $(seq "$SERVERS"); do
		"$bin/simserver" -listen 127.0.0.1:0 "${engine[@]}" </dev/null >"$OUT/sim-$tag-$i.log" 2>&1 &
		urls+=("$(started simserver "$OUT/sim-$tag-$i.log")")
		backends+=(-backend "${urls[-1]}")
	done
	local routing=(-router "$router")
	# A router the gateway does not know by name is a configuration in bench/profiles.
	[ -f "bench/profiles/$router.json" ] && routing=(-config "bench/profiles/$router.json")
	"$bin/gateway" -listen 127.0.0.1:0 "${routing[@]}" -policy fcfs -max-inflight $((32 * SERVERS)) \
		-scrape-interval 50ms -tokenizer endpoint -block-size 64 "${backends[@]}" \
		</dev/null >"$OUT/gateway-$tag.log" 2>&1 &
	gw=$(started "usher gateway" "$OUT/gateway-$tag.log")
	"$bin/loadgen" -url "$gw" -workload "$WORKLOAD" -seed "$SEED" -limit "$REQUESTS" -speed "$RATE" -duration 0 \
		-max-context -1 -quiet -json -label "$router" >"$OUT/process-$tag.json"
	for u in "${urls[@]}"; do
		curl -s "$u/metrics" | grep -E '^vllm:(time_to_first_token|e2e_request_latency)_seconds_(sum|count)' |
			sed "s|^|$u |" >>"$OUT/metrics-$tag.txt"
	done
)

jobs=()
for router in $ROUTERS; do
	for n in $(seq "$REPEAT"); do
		jobs+=("$router $n")
	done
done
if [ -z "${REUSE:-}" ]; then
	for job in "${jobs[@]}"; do
		while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n || true; done
		run $job &
	done
	wait
fi

# The front end's cost per prompt token, unless FRONTEND_PER_TOKEN gives it: the median over
# the process runs of (client TTFT − server TTFT) / prompt tokens, both means.
if [ -z "${FRONTEND_PER_TOKEN:-}" ]; then
	FRONTEND_PER_TOKEN=$(python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
per = []
for f in glob.glob(f"{sys.argv[1]}/process-*.json"):
    p = json.load(open(f))
    ttft, n = 0.0, 0
    for line in open(f.replace("process-", "metrics-").replace(".json", ".txt")):
        name, value = line.split()[1].split("{")[0], float(line.split()[2])
        if name == "vllm:time_to_first_token_seconds_sum":
            ttft += value
        elif name == "vllm:time_to_first_token_seconds_count":
            n += value
    if n and p["ok"]:
        per.append((p["ttft"]["mean_ms"] / 1000 - ttft / n) / (p["prompt_tokens"] / p["ok"]))
print(f"{max(0, statistics.median(per)) * 1e9:.0f}ns" if per else "0s")
PY
)
fi
echo "front end: $FRONTEND_PER_TOKEN per prompt token"
for router in $ROUTERS; do
	"$bin/compare" -workload "$WORKLOAD" -seed "$SEED" -seeds 1 -requests "$REQUESTS" -rate "$RATE" \
		-servers "$SERVERS" -kv-blocks "$KV_BLOCKS" -frontend-per-token "$FRONTEND_PER_TOKEN" \
		-policies fcfs -routers "$router" -goal=false >"$OUT/sim-$router.md"
done

python3 - "$OUT" "$REPEAT" $ROUTERS <<'PY'
import json, re, statistics, sys
out, repeat, routers = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def secs(s):
    s = s.strip().split(" ")[0]
    return float(s[:-2]) / 1000 if s.endswith("ms") else float(s[:-1]) if s.endswith("s") else float(s)

def share(s):
    return float(s.strip().split(" ")[0].rstrip("%")) / 100

def process(r, n):
    p = json.load(open(f"{out}/process-{r}-{n}.json"))
    ttft_sum, count, e2e = 0.0, 0, {}
    for line in open(f"{out}/metrics-{r}-{n}.txt"):
        url, name, value = line.split()[0], line.split()[1].split("{")[0], float(line.split()[2])
        if name == "vllm:time_to_first_token_seconds_sum":
            ttft_sum += value
        elif name == "vllm:time_to_first_token_seconds_count":
            count += value
        elif name == "vllm:e2e_request_latency_seconds_sum":
            e2e[url] = value
    loads = list(e2e.values())
    gw = (p["ttft"]["mean_ms"] / 1000 - ttft_sum / count) * 1000 if count else float("nan")
    return [p["ttft"]["p50_ms"] / 1000, p["ttft"]["p90_ms"] / 1000, p["ttft"]["p99_ms"] / 1000, p["prefix_hit_rate"],
            p["first_turn"]["prefix_hit_rate"], p["later_turns"]["prefix_hit_rate"],
            max(loads) / statistics.mean(loads) if loads and statistics.mean(loads) > 0 else float("nan"), gw]

def simulated(r):
    perf = newcomers = None
    kind = ""
    for line in open(f"{out}/sim-{r}.md"):
        if line.startswith("### "):
            kind = line
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 10 and cells[1] == r:
            if "performance" in kind:
                perf = cells
            elif "newcomers" in kind:
                newcomers = cells
    if perf is None or newcomers is None:
        return None
    return [secs(perf[4]), secs(perf[5]), secs(perf[6]), share(perf[9]), share(newcomers[8]), share(newcomers[13]),
            float(perf[12].split(" ")[0]), float("nan")]

fmt = [lambda x: f"{x:.3f}s"] * 3 + [lambda x: f"{x:.3f}"] * 3 + [lambda x: f"{x:.2f}", lambda x: f"{x:.0f}"]
print("| router | side | TTFT p50 | TTFT p90 | TTFT p99 | cached | cached first | cached later | max/mean load | gw ms |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in routers:
    runs = [process(r, n) for n in range(1, repeat + 1)]
    med = [statistics.median(col) for col in zip(*runs)]
    cells = []
    for k, col in enumerate(zip(*runs)):
        cell = fmt[k](med[k])
        if repeat > 1 and min(col) != max(col):
            cell += f" ({fmt[k](min(col))}–{fmt[k](max(col))})"
        cells.append(cell)
    print(f"| {r} | processes{f' ×{repeat}' if repeat > 1 else ''} | " + " | ".join(cells) + " |")
    sim = simulated(r)
    if sim is None:
        print(f"| {r} | (no simulator row) | | | | | | | | |")
        continue
    print(f"| {r} | simulator | " + " | ".join(fmt[k](x) for k, x in enumerate(sim[:7])) + " | |")
    err = [f"{(s - q) / q:+.0%}" if q else "n/a" for s, q in zip(sim[:3], med[:3])]
    err += [f"{s - q:+.3f}" for s, q in zip(sim[3:6], med[3:6])]
    err += [f"{(sim[6] - med[6]) / med[6]:+.0%}" if med[6] else "n/a"]
    print(f"| {r} | error | " + " | ".join(err) + " | |")
PY
echo "reports in $OUT"
