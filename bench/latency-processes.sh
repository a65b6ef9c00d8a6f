#!/usr/bin/env bash
# latency-processes.sh — how far the gateway's learned latency model is off, on real processes,
# from a cold start and after one server slows down mid-run (issue 31): SERVERS simserver
# processes (Qwen3-32B on 2×H100 in real time, the bench simulator's servers) behind the
# gateway routing by predicted latency (ROUTER, usher-latency: health, then the
# predicted-latency scorer), driven by loadgen's synthetic workload of streamed chat sessions
# starting within DURATION; once the SLOW_AT share of the workload's requests has been measured
# (by default half: the middle of the run), the server picked most so far is slowed FACTOR×
# (simserver's POST /debug/slow: every engine step takes FACTOR times its modelled duration).
#
#   bash bench/latency-processes.sh
#   REPEAT=1 DURATION=30s COLD=100 SLOW_AT=0.6 FACTOR=2 bash bench/latency-processes.sh
#
# The gateway's /metrics is scraped at the start, once COLD requests have been measured, just
# before the slowdown, AFTER seconds after it, and when loadgen is done (its sessions' later
# turns run on past DURATION): four phases, cold (the model learning from nothing), warm,
# slowed (right after the slowdown, while the model adapts) and adapted. Per phase the table
# gives:
#
#   - the median and p90 of the absolute prediction error |predicted − observed| on the backend
#     chosen, of TTFT (from the pick to the first token) and of TPOT, interpolated within the
#     buckets of the deltas of usher_latency_prediction_error_seconds{target} as Prometheus'
#     histogram_quantile does (the buckets double from 1 ms: a quantile is good to within its
#     bucket); "requests scored" counts the TTFT observations;
#   - the share of the phase's picks that went to the slowed server (usher_picks_total), 1/SERVERS
#     when the router treats it as the others;
#   - from the servers' own histograms, the mean TTFT (from arrival at the server) and
#     inter-token latency at the slowed server and at the others (the slowed server's cold and
#     warm are before it was slowed; n/a when it served nothing in the phase).
#
# With REPEAT runs, each cell is the median over the runs and their range. Runs are sequential,
# since every one is timed in real time.
#
# Environment: SERVERS, ROUTER (a gateway profile name, or a configuration in bench/profiles),
# RATE (sessions starting per second), DURATION (sessions start within it), SEED, COLD
# (requests measured before the cold phase ends), SLOW_AT (share of the workload's requests
# measured before the slowdown; at least COLD + 1), FACTOR, AFTER (seconds after the slowdown
# that end the slowed phase), RECOVER (set: the slowed server gets its speed back when the
# slowed phase ends, and the last phase, "recovered", shows whether the router returns to it),
# REPEAT, OUT (directory for the scrapes, reports and logs).
set -euo pipefail
cd "$(dirname "$0")/.."

SERVERS=${SERVERS:-4}
ROUTER=${ROUTER:-usher-latency}
RATE=${RATE:-3}
DURATION=${DURATION:-60s}
SEED=${SEED:-1}
COLD=${COLD:-200}
SLOW_AT=${SLOW_AT:-0.5}
FACTOR=${FACTOR:-3}
AFTER=${AFTER:-15}
REPEAT=${REPEAT:-3}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

. bench/procs.sh # started, build_tools
build_tools

engine=(-profile qwen3-32b-h100 -block-size 64 -kv-blocks 4500 -max-model-len 131072)


# measured GATEWAY: streamed requests whose TTFT prediction was scored so far.
measured() {
	curl -s "$1/metrics" | awk '/^usher_latency_prediction_error_seconds_count\{.*target="ttft"/ { n += $NF } END { print n + 0 }'
}

run() ( # N: one run, its scrapes in $OUT/run-N/
	trap 'pkill -P $BASHPID 2>/dev/null || true' EXIT
	local dir=$OUT/run-$1 backends=() urls=()
	mkdir -p "$dir"
	for i in $(seq "$SERVERS"); do
		"$bin/simserver" -listen 127.0.0.1:0 "${engine[@]}" </dev/null >"$dir/sim-$i.log" 2>&1 &
		urls+=("$(started simserver "$dir/sim-$i.log")")
		backends+=(-backend "${urls[-1]}")
	done
	local routing=(-router "$ROUTER")
	[ -f "bench/profiles/$ROUTER.json" ] && routing=(-config "bench/profiles/$ROUTER.json")
	"$bin/gateway" -listen 127.0.0.1:0 "${routing[@]}" -policy fcfs -max-inflight $((32 * SERVERS)) \
		-scrape-interval 50ms -tokenizer endpoint -block-size 64 "${backends[@]}" \
		</dev/null >"$dir/gateway.log" 2>&1 &
	local gw
	gw=$(started "usher gateway" "$dir/gateway.log")
	scrape() { # POINT: the gateway's metrics, and the servers' latency sums, labelled with the server
		curl -s "$gw/metrics" >"$dir/$1.prom"
		for u in "${urls[@]}"; do
			curl -s "$u/metrics" | grep -E '^vllm:(time_to_first_token|inter_token_latency)_seconds_(sum|count)' |
				sed "s|{|{server=\"$u\",|"
		done >>"$dir/$1.prom"
	}

	scrape start
	"$bin/loadgen" -url "$gw" -rate "$RATE" -duration "$DURATION" -seed "$SEED" -quiet -json \
		-label "$ROUTER" >"$dir/loadgen.json" 2>"$dir/loadgen.log" &
	local lg=$! total=""
	# loadgen's first line on stderr gives the workload's requests: "..., 41 sessions, 184 requests, ...".
	for _ in $(seq 100); do
		total=$(grep -o '[0-9]* requests' "$dir/loadgen.log" | head -1 | cut -d' ' -f1 || true)
		[ -n "$total" ] && break
		sleep 0.1
	done
	[ -n "$total" ] || { echo "loadgen did not start:" >&2; cat "$dir/loadgen.log" >&2; exit 1; }
	local slow_at
	slow_at=$(python3 -c "print(max($COLD + 1, round($total * $SLOW_AT)))")
	while [ "$(measured "$gw")" -lt "$COLD" ]; do sleep 0.2; done
	scrape cold
	while [ "$(measured "$gw")" -lt "$slow_at" ]; do sleep 0.2; done
	scrape before
	# The server picked most so far is slowed.
	local slowed
	slowed=$(awk '/^usher_picks_total\{backend="http/ { if ($NF > n) { n = $NF; b = $1 } } END { print b }' "$dir/before.prom" |
		grep -o 'http://[0-9.:]*')
	echo "$slowed" >"$dir/slowed"
	curl -sf -X POST "$slowed/debug/slow?factor=$FACTOR" >/dev/null
	sleep "$AFTER"
	scrape after
	[ -z "${RECOVER:-}" ] || curl -sf -X POST "$slowed/debug/slow?factor=1" >/dev/null
	wait "$lg"
	scrape end
	echo "run $1: $total requests, slowed $slowed ${FACTOR}× after $slow_at" >&2
)

for n in $(seq "$REPEAT"); do
	run "$n"
done

python3 - "$OUT" "$REPEAT" "$SERVERS" "${RECOVER:-}" <<'PY'
import math, re, statistics, sys
out, repeat, servers, recover = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
points = ["start", "cold", "before", "after", "end"]
phases = ["cold", "warm", "slowed", "recovered" if recover else "adapted"]
line = re.compile(r"^([\w:]+)\{([^}]*)\} (\S+)$")

def parse(path):
    """{(name, frozenset(labels)): value} of a Prometheus text scrape."""
    m = {}
    for l in open(path):
        g = line.match(l.strip())
        if g:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', g.group(2)))
            m[(g.group(1), labels)] = float(g.group(3))
    return m

def buckets(m, target):
    """[(le, cumulative count)] of the error histogram of target, le ascending."""
    bs = []
    for (name, labels), v in m.items():
        d = dict(labels)
        if name == "usher_latency_prediction_error_seconds_bucket" and d.get("target") == target:
            bs.append((float(d["le"]), v))
    return sorted(bs)

def quantile(q, bs):
    """histogram_quantile over cumulative buckets bs: linear within the bucket."""
    total = bs[-1][1] if bs else 0
    if total == 0:
        return math.nan
    rank, lo, below = q * total, 0.0, 0.0
    for le, c in bs:
        if c >= rank:
            if math.isinf(le):
                return lo  # beyond the last bound: its lower edge, as Prometheus does
            return lo + (le - lo) * ((rank - below) / (c - below) if c > below else 0)
        lo, below = le, c
    return lo

def picks(m):
    p = {}
    for (name, labels), v in m.items():
        if name == "usher_picks_total":
            p[dict(labels)["backend"]] = v
    return p

def server_means(a, b, slowed):
    """Mean TTFT and ITL between scrapes a and b, at the slowed server and at the others."""
    acc = {}
    for (name, labels), v in b.items():
        d = dict(labels)
        if name.startswith("vllm:") and "server" in d:
            k = (d["server"] == slowed, name.split("_seconds_")[0], name.rsplit("_", 1)[1])
            acc[k] = acc.get(k, 0) + v - a.get((name, labels), 0)
    mean = lambda s, m: acc.get((s, m, "sum"), 0) / acc[(s, m, "count")] if acc.get((s, m, "count")) else math.nan
    return [mean(s, m) for s in (True, False) for m in ("vllm:time_to_first_token", "vllm:inter_token_latency")]

rows = {ph: [] for ph in phases}  # per phase, per run: [n, ttft50, ttft90, tpot50, tpot90, share, means...]
for n in range(1, repeat + 1):
    d = f"{out}/run-{n}"
    slowed = open(f"{d}/slowed").read().strip()
    ms = [parse(f"{d}/{p}.prom") for p in points]
    for k, ph in enumerate(phases):
        a, b = ms[k], ms[k + 1]
        cells = []
        for target in ("ttft", "tpot"):
            ba, bb = dict(buckets(a, target)), buckets(b, target)
            delta = [(le, c - ba.get(le, 0)) for le, c in bb]
            cells.append(delta[-1][1] if delta else 0)
            cells += [quantile(0.5, delta), quantile(0.9, delta)]
        pa, pb = picks(a), picks(b)
        dp = {k2: pb[k2] - pa.get(k2, 0) for k2 in pb}
        tot = sum(dp.values())
        share = dp.get(slowed, math.nan)
        rows[ph].append([cells[0], cells[1], cells[2], cells[4], cells[5], share / tot if tot else math.nan] + server_means(a, b, slowed))

def cell(vals, fmt):
    vals = [v for v in vals if not math.isnan(v)]
    if not vals:
        return "n/a"
    s = fmt(statistics.median(vals))
    if len(vals) > 1 and min(vals) != max(vals):
        s += f" ({fmt(min(vals))}–{fmt(max(vals))})"
    return s

ms_ = lambda x: f"{x * 1000:.0f} ms" if x >= 0.01 else f"{x * 1000:.1f} ms"
pct = lambda x: f"{x:.0%}"
cnt = lambda x: f"{x:.0f}"
print(f"| phase | requests scored | TTFT err p50 | TTFT err p90 | TPOT err p50 | TPOT err p90 | slowed server's share (fair {1 / servers:.0%}) | TTFT mean slowed / others | ITL mean slowed / others |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for ph in phases:
    r = rows[ph]
    col = lambda i: [x[i] for x in r]
    print(f"| {ph} | {cell(col(0), cnt)} | {cell(col(1), ms_)} | {cell(col(2), ms_)} | {cell(col(3), ms_)} | {cell(col(4), ms_)} | {cell(col(5), pct)} | {cell(col(6), ms_)} / {cell(col(8), ms_)} | {cell(col(7), ms_)} / {cell(col(9), ms_)} |")
PY
echo "scrapes and logs in $OUT"
