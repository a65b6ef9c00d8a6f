#!/bin/sh
# frontier.sh — the admission frontier on real processes: for each policy (and bounded wait's
# W) it starts the gateway on its embedded simulated fleet, replays the same synthetic agentic
# load through loadgen, and keeps loadgen's JSON report; at the end it prints one line per
# policy: newcomers (first turns) sent, rejected and their TTFT, later turns and their TTFT,
# throughput. Run from the repository root:
#
#	sh examples/loadgen/frontier.sh [OUT_DIR]
#
# Environment: RATE (sessions/s, default 2), DURATION (default 60s), TTL (default 20s),
# INFLIGHT (gateway -max-inflight, default 8), SIM_PROFILE (the simulated servers' profile,
# default qwen3-32b-h100, slow enough to saturate), POLICIES (default below), PORT (default 18090),
# GATEWAY_ARGS (extra gateway flags, e.g. "-early-shed"). The load is offered equally to every
# policy: loadgen sends on a schedule and does not retry (-retries 0), so a shed first turn
# ends its session and the report shows it as a rejection, not as a lighter load.
set -eu
out=${1:-frontier-out}
rate=${RATE:-2}
duration=${DURATION:-60s}
ttl=${TTL:-20s}
inflight=${INFLIGHT:-8}
profile=${SIM_PROFILE:-qwen3-32b-h100}
port=${PORT:-18090}
policies=${POLICIES:-"turn-priority fcfs las vtc bounded-wait:5s bounded-wait:10s bounded-wait:15s"}
mkdir -p "$out"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/gateway" ./examples/gateway
go build -o "$bin/loadgen" ./examples/loadgen
for p in $policies; do
	name=${p%%:*}
	args="-policy $name"
	label=$name
	case $p in *:*)
		w=${p#*:}
		args="$args -bounded-wait $w"
		label="$name-$w"
	esac
	log="$out/gateway-$label.log"
	# shellcheck disable=SC2086
	"$bin/gateway" -listen "127.0.0.1:$port" -ttl "$ttl" -max-inflight "$inflight" -sim-profile "$profile" $args ${GATEWAY_ARGS:-} >"$log" 2>&1 &
	gw=$!
	i=0
	until grep -q "listening on" "$log"; do
		i=$((i + 1))
		if [ $i -gt 150 ] || ! kill -0 $gw 2>/dev/null; then
			echo "gateway for $label did not start:" >&2
			cat "$log" >&2
			kill $gw 2>/dev/null || true
			exit 1
		fi
		sleep 0.2
	done
	echo "== $label" >&2
	"$bin/loadgen" -url "http://127.0.0.1:$port" -rate "$rate" -duration "$duration" -retries 0 -quiet -json >"$out/$label.json" || true
	kill $gw
	wait $gw 2>/dev/null || true
done
python3 - "$out" $policies <<'PY'
import json, sys
out = sys.argv[1]
print("| policy | first sent | first 429/503 | first TTFT p50 / p99 | later sent | later 429/503 | later TTFT p50 / p99 | req/s |")
print("|---|---:|---:|---|---:|---:|---|---:|")
for p in sys.argv[2:]:
    label = p.replace(":", "-")
    try:
        r = json.load(open(f"{out}/{label}.json"))
    except (OSError, ValueError) as e:
        print(f"| {label} | no report ({e}) |")
        continue
    f, l = r["first_turn"], r["later_turns"]
    ms = lambda d: f'{d["ttft"]["p50_ms"]/1000:.2f} / {d["ttft"]["p99_ms"]/1000:.2f} s'
    print(f'| {label} | {f["requests"]} | {f["rejected_429"]}/{f["rejected_503"]} | {ms(f)} | {l["requests"]} | {l["rejected_429"]}/{l["rejected_503"]} | {ms(l)} | {r["requests_per_sec"]:.2f} |')
PY
