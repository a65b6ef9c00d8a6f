#!/usr/bin/env bash
# pd-kvboth-processes.sh — servers that change role, on real processes: the gateway example on its
# embedded simulated fleet of eight Qwen3-32B-on-2×H100 servers in real time (KV events followed,
# KV pulled over loopback by simfleet's side channel), in three modes at once, each gateway on a
# port of its own so that the three share the machine's load alike:
#
#   agg      aggregated: every server serves both, no connector
#   always   always-P/D at 5+3, the simulator's best static split (-sim-prefill 5 -decider always)
#   planner  every server kv_both, the role planner deciding (-sim-kv-both)
#
# driven by loadgen with the simulator's workloads (the same sources, prompts synthesised from
# their block ids) at fixed rates taken from bench/README's goodput tables, not searched here:
#
#   long     bench.LongPrompts, the first LONG_REQUESTS requests at ×LONG_RATE
#   phases   bench.PhaseMix: chat, long prompts, chat, PHASE_LENGTH each, at ×PHASE_RATE; the
#            run stops TAIL after the last phase (loadgen interrupted: the turns of chat's
#            conversations still to come are not sent, those in flight are left out), where the
#            simulator plays every later turn (chat's conversations run up to ten minutes on)
#
# REPEAT runs of each (seed = the run's number). One markdown table per workload: the median of
# the runs and their range, for TTFT and TPOT (each answer's mean time per token after the first)
# at p50 and p99, the share of requests meeting both targets of bench's tight (TTFT ≤ 1 s, TPOT
# ≤ 25 ms) and relaxed (3 s, 50 ms) goals, the planner's role changes per server per 30 s
# (usher_pd_role_changes_total over the run), the mean servers in prefill in each
# phase (usher_pd_planned_role, sampled every 5 s; the tail counts in the last) and the P/D
# fallbacks. `uptime` is recorded
# before and after every run (OUT/uptime.log). See bench/README.md, "Servers that change role".
#
#   bash bench/pd-kvboth-processes.sh                                   # 10-minute phases: ~2 h
#   PHASE_LENGTH=3m bash bench/pd-kvboth-processes.sh
#   WORKLOADS=phases PHASE_LENGTH=20s LONG_REQUESTS=100 REPEAT=1 bash bench/pd-kvboth-processes.sh  # smoke
#
# Environment: WORKLOADS (long, phases), MODES (agg, always, planner), REPEAT, LONG_RATE,
# LONG_REQUESTS, PHASE_RATE, PHASE_LENGTH (Ns or Nm), TAIL (seconds), SERVERS, OUT (directory for the reports and logs),
# PORT (the first of the modes' ports; the others follow it).
set -euo pipefail
cd "$(dirname "$0")/.."

WORKLOADS=${WORKLOADS:-long phases}
MODES=${MODES:-agg always planner}
REPEAT=${REPEAT:-3}
LONG_RATE=${LONG_RATE:-2}
LONG_REQUESTS=${LONG_REQUESTS:-1500}
PHASE_RATE=${PHASE_RATE:-1.5}
PHASE_LENGTH=${PHASE_LENGTH:-10m}
TAIL=${TAIL:-60}
SERVERS=${SERVERS:-8}
OUT=${OUT:-$(mktemp -d)}
PORT=${PORT:-20000}

bin=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$bin"
}
trap cleanup EXIT
go build -o "$bin/gateway" ./examples/gateway
go build -o "$bin/loadgen" ./examples/loadgen
mkdir -p "$OUT"
echo "OUT=$OUT"
case $PHASE_LENGTH in
*m) phase_s=$((${PHASE_LENGTH%m} * 60)) ;;
*s) phase_s=${PHASE_LENGTH%s} ;;
*) echo "PHASE_LENGTH $PHASE_LENGTH: want Ns or Nm" >&2; exit 2 ;;
esac

flags() { # mode → gateway flags
	case $1 in
	agg) ;;
	always) echo "-sim-prefill 5 -decider always" ;;
	planner) echo "-sim-kv-both" ;;
	*) echo "unknown mode $1" >&2; exit 2 ;;
	esac
}

# sample_roles URL FILE: every 5 s, a line "SECONDS SERVERS-IN-PREFILL" until killed.
sample_roles() {
	local t0=$SECONDS
	while sleep 5; do
		echo "$((SECONDS - t0)) $(curl -s "$1/metrics" | grep -c '^usher_pd_planned_role{.*role="prefill"} 1' || true)" >>"$2"
	done
}

one() { # workload, run
	local wl=$1 rep=$2 i=0 gws=() lgs=() samplers=()
	for mode in $MODES; do
		local port=$((PORT + i)) name="$wl-$mode-$rep"
		# shellcheck disable=SC2046
		"$bin/gateway" -listen "127.0.0.1:$port" -sim-servers "$SERVERS" -sim-profile qwen3-32b-h100 $(flags "$mode") >"$OUT/$name.gw.log" 2>&1 &
		gws+=($!)
		pids+=($!)
		i=$((i + 1))
	done
	for j in $(seq 0 $((i - 1))); do
		for _ in $(seq 150); do
			curl -sf "http://127.0.0.1:$((PORT + j))/health" >/dev/null && break
			sleep 0.2
		done
	done
	echo "$wl run $rep start $(date -u +%H:%M:%S): $(uptime)" | tee -a "$OUT/uptime.log"
	i=0
	for mode in $MODES; do
		local url="http://127.0.0.1:$((PORT + i))" name="$wl-$mode-$rep"
		case $wl in
		long) set -- 0 -workload long-prompt -limit "$LONG_REQUESTS" -speed "$LONG_RATE" -duration 0 ;;
		phases) set -- $((3 * phase_s + TAIL)) -workload phases -phase-length "$PHASE_LENGTH" -speed "$PHASE_RATE" ;;
		*) echo "unknown workload $wl" >&2; exit 2 ;;
		esac
		local stop=$1
		shift
		timeout -s INT "$stop" "$bin/loadgen" -url "$url" -seed "$rep" "$@" -quiet -json -label "$name" >"$OUT/$name.json" 2>"$OUT/$name.lg.log" &
		lgs+=($!)
		pids+=($!)
		sample_roles "$url" "$OUT/$name.roles" &
		samplers+=($!)
		pids+=($!)
		i=$((i + 1))
	done
	local rc=0
	for p in "${lgs[@]}"; do
		wait "$p" || [ $? -eq 124 ] || rc=1 # 124: stopped at the end of the tail
	done
	echo "$wl run $rep end   $(date -u +%H:%M:%S): $(uptime)" | tee -a "$OUT/uptime.log"
	for p in "${samplers[@]}"; do kill "$p" 2>/dev/null || true; done
	i=0
	for mode in $MODES; do
		curl -s "http://127.0.0.1:$((PORT + i))/metrics" | grep '^usher_pd_' >"$OUT/$wl-$mode-$rep.metrics" || true
		i=$((i + 1))
	done
	for p in "${gws[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${gws[@]}" "${samplers[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
	return $rc
}

for wl in $WORKLOADS; do
	for rep in $(seq "$REPEAT"); do
		one "$wl" "$rep" || echo "loadgen failed in $wl run $rep" >&2
	done
done

python3 - "$OUT" "$SERVERS" "$WORKLOADS" "$MODES" "$phase_s" <<'EOF'
import glob, json, re, statistics, sys
out, servers, workloads, modes, phase = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), float(sys.argv[5])
names = {"agg": "aggregated", "always": "always 5+3", "planner": "planner (kv_both)"}
for wl in workloads:
    print(f"\n{wl}:\n")
    print("| mode | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | tight | relaxed | role changes /server/30 s | servers in prefill (mean, by phase) | fallbacks | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for m in modes:
        runs = []
        for f in sorted(glob.glob(f"{out}/{wl}-{m}-*.json")):
            try:
                d = json.load(open(f))
            except ValueError:
                continue
            met = open(f[:-5] + ".metrics").read() if glob.glob(f[:-5] + ".metrics") else ""
            changes = sum(float(v) for v in re.findall(r'^usher_pd_role_changes_total(?:\{[^}]*\})? (\S+)', met, re.M))
            fb = sum(float(v) for v in re.findall(r'^usher_pd_requests_total\{decision="fallback"\} (\S+)', met, re.M))
            goals = {g["name"]: g["share"] for g in d.get("goals") or []}
            secs = d["seconds"]
            roles = [tuple(map(float, l.split())) for l in open(f[:-5] + ".roles")] if glob.glob(f[:-5] + ".roles") else []
            # by phase (the tail in the last); the long run has one
            bounds = [(0, phase), (phase, 2 * phase), (2 * phase, 1e18)] if wl == "phases" else [(0, 1e18)]
            thirds = []
            for lo, hi in bounds:
                xs = [n for t, n in roles if lo <= t < hi]
                thirds.append(sum(xs) / len(xs) if xs else 0.0)
            runs.append(dict(ttft50=d["ttft"]["p50_ms"], ttft99=d["ttft"]["p99_ms"], tpot50=d["tpot"]["p50_ms"], tpot99=d["tpot"]["p99_ms"],
                             tight=goals.get("tight", 0.0), relaxed=goals.get("relaxed", 0.0),
                             changes=changes / servers / (secs / 30) if secs else 0.0, fallbacks=fb, errors=d["errors"], requests=d["requests"],
                             thirds=thirds))
        if not runs:
            continue
        def cell(k, fmt):  # the median with its unit, then the range without
            vs = [r[k] for r in runs]
            num = fmt.split()[0]
            return (fmt % statistics.median(vs)) + (" (" + num % min(vs) + "–" + num % max(vs) + ")" if len(vs) > 1 else "")
        th = "—" if m != "planner" else " / ".join("%.1f" % statistics.median(r["thirds"][k] for r in runs) for k in range(len(runs[0]["thirds"])))
        print(f"| {names.get(m, m)} | {cell('ttft50', '%.0f ms')} | {cell('ttft99', '%.0f ms')} | {cell('tpot50', '%.1f ms')} | {cell('tpot99', '%.1f ms')} | "
              f"{cell('tight', '%.3f')} | {cell('relaxed', '%.3f')} | {cell('changes', '%.3f') if m == 'planner' else '—'} | {th} | {cell('fallbacks', '%.0f')} | {cell('errors', '%.0f')} |")
    print(f"\n(requests per run: {sorted(set(r['requests'] for r in runs))})")
EOF
