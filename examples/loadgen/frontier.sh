#!/bin/sh
# frontier.sh — the admission frontier on real processes: for each policy (and bounded wait's
# W) it starts the gateway on its embedded simulated fleet, replays the same synthetic agentic
# load through loadgen, and keeps loadgen's JSON report; at the end loadgen -frontier prints one
# line per policy (newcomers — first turns — sent, rejected and their TTFT, later turns and their
# TTFT, throughput) and draws the frontier into OUT_DIR/frontier.png and frontier.svg (x: the
# newcomers' p99 TTFT, y: the later turns' p50 TTFT, marker area: newcomers rejected). Only Go
# is needed. Run from the repository root:
#
#	sh examples/loadgen/frontier.sh [OUT_DIR]
#
# Environment: RATE (sessions/s, default 2), DURATION (default 60s), TTL (default 20s),
# INFLIGHT (gateway -max-inflight, default 8), SIM_PROFILE (the simulated servers' profile,
# default qwen3-32b-h100, slow enough to saturate), POLICIES (default below; NAME:W passes W as
# -bounded-wait, for bounded-wait and gittins-bounded-wait), PORT (default 18090),
# GATEWAY_ARGS (extra gateway flags, e.g. "-early-shed"), GITTINS_ARGS (extra gateway flags for
# the Gittins policies, default "-gittins-idle 10s -gittins-min-sessions 30": a session has
# ended after twice loadgen's longest think time, and the index may leave its prior once 30
# have ended; add -gittins-rebuild-every N, since the first rebuild of the index otherwise
# waits for 64, more than a run of a minute ends), LOADGEN_ARGS (extra loadgen flags, e.g. "-sessions
# increasing-hazard"), SEEDS (the workload seeds, one run of every policy each, default 1; the
# runs of a policy share its label, and -frontier's task table gives their median and range).
# The load is offered equally to every policy: loadgen sends on a schedule and does not retry
# (-retries 0), so a shed first turn ends its session and the report shows it as a rejection,
# not as a lighter load. The machine's other work shows in the latencies: run it alone, or
# under nice on a shared machine and say so.
set -eu
out=${1:-frontier-out}
rate=${RATE:-2}
duration=${DURATION:-60s}
ttl=${TTL:-20s}
inflight=${INFLIGHT:-8}
profile=${SIM_PROFILE:-qwen3-32b-h100}
port=${PORT:-18090}
policies=${POLICIES:-"turn-priority fcfs las vtc bounded-wait:5s bounded-wait:10s bounded-wait:15s gittins gittins-bounded-wait:10s"}
seeds=${SEEDS:-1}
gittins_args=${GITTINS_ARGS:-"-gittins-idle 10s -gittins-min-sessions 30"}
mkdir -p "$out"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/gateway" ./examples/gateway
go build -o "$bin/loadgen" ./examples/loadgen
set -- # the reports, in the order of $seeds, then $policies
for seed in $seeds; do
for p in $policies; do
	name=${p%%:*}
	args="-policy $name"
	label=$name
	case $p in *:*)
		w=${p#*:}
		args="$args -bounded-wait $w"
		label="$name-$w"
	esac
	case $name in gittins*) args="$args $gittins_args" ;; esac
	file=$label
	if [ "$seeds" != 1 ]; then
		file="$label-seed$seed"
	fi
	log="$out/gateway-$file.log"
	# shellcheck disable=SC2086
	"$bin/gateway" -listen "127.0.0.1:$port" -ttl "$ttl" -max-inflight "$inflight" -sim-profile "$profile" $args ${GATEWAY_ARGS:-} >"$log" 2>&1 &
	gw=$!
	i=0
	until grep -qs "listening on" "$log"; do
		i=$((i + 1))
		if [ $i -gt 150 ] || ! kill -0 $gw 2>/dev/null; then
			echo "gateway for $label did not start:" >&2
			cat "$log" >&2
			kill $gw 2>/dev/null || true
			exit 1
		fi
		sleep 0.2
	done
	echo "== $label, seed $seed" >&2
	# shellcheck disable=SC2086
	"$bin/loadgen" -url "http://127.0.0.1:$port" -rate "$rate" -duration "$duration" -seed "$seed" -retries 0 -quiet -json -label "$label" ${LOADGEN_ARGS:-} >"$out/$file.json" || true
	set -- "$@" "$out/$file.json"
	kill $gw
	wait $gw 2>/dev/null || true
done
done
# The table on stdout, the plots beside the reports (loadgen -frontier; exits non-zero, after
# the table, if a report is missing or unreadable).
"$bin/loadgen" -frontier "$out" -title "admission frontier: $rate sessions/s, TTL $ttl, $inflight in flight" "$@"
