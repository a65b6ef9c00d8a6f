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
# the Gittins policies, default "-gittins-idle 10s -gittins-min-sessions 30
# -gittins-rebuild-every 16": a session has ended after twice loadgen's longest think time, and
# the index leaves its prior once 30 have ended, rebuilt every 16 more — at 0.9 agentic
# sessions/s, within two minutes), LOADGEN_ARGS (extra loadgen flags, e.g. "-sessions
# increasing-hazard", or "-split 120s -session-idle 10s" to see the turns before and after the
# index learns), SEEDS (the workload seeds, one run of every policy each, default 1; the
# runs of a policy share its label, and -frontier's task table gives their median and range).
# PARALLEL=1 runs the policies of a seed at once, each gateway on its own port (PORT, PORT+1,
# ...), their loadgens started together once every gateway listens, so that they share the
# machine's load alike; the seeds still run one after another. It fits runs of hundreds of
# sessions (a DURATION of minutes) into the time of one per seed, at the price of a machine
# loaded by all of them: the latencies are comparable between the policies of a seed, not
# with serial runs. The load average (uptime) is written with every run into OUT_DIR/load.txt,
# and with PARALLEL=1 every 30 s into OUT_DIR/load-seedN.txt.
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
parallel=${PARALLEL:-0}
gittins_args=${GITTINS_ARGS:-"-gittins-idle 10s -gittins-min-sessions 30 -gittins-rebuild-every 16"}
mkdir -p "$out"
bin=$(mktemp -d)
# start_gateway LABEL PORT ARGS...: starts the gateway, waits until it listens, and appends its
# pid to $gws.
start_gateway() {
	glabel=$1 gport=$2
	shift 2
	log="$out/gateway-$glabel.log"
	"$bin/gateway" -listen "127.0.0.1:$gport" -ttl "$ttl" -max-inflight "$inflight" -sim-profile "$profile" "$@" >"$log" 2>&1 &
	gw=$!
	gws="$gws $gw"
	i=0
	until grep -qs "listening on" "$log"; do
		i=$((i + 1))
		if [ $i -gt 150 ] || ! kill -0 $gw 2>/dev/null; then
			echo "gateway for $glabel did not start:" >&2
			cat "$log" >&2
			stop
			exit 1
		fi
		sleep 0.2
	done
}
# stop ends the gateways and the load sampler that this script started.
stop() {
	for q in $gws $sampler; do
		kill "$q" 2>/dev/null || true
		wait "$q" 2>/dev/null || true
	done
	gws= sampler=
}
# sample FILE: the load average every 30 s into FILE, in the background ($sampler).
sample() {
	(while :; do
		echo "$(date -u +%T) $(uptime)" >>"$1"
		sleep 30
	done) &
	sampler=$!
}
gws= sampler=
trap 'stop; rm -rf "$bin"' EXIT
go build -o "$bin/gateway" ./examples/gateway
go build -o "$bin/loadgen" ./examples/loadgen
set -- # the reports, in the order of $seeds, then $policies
for seed in $seeds; do
	n=0
	loads= # the loadgens running at once (PARALLEL)
	if [ "$parallel" = 1 ]; then
		sample "$out/load-seed$seed.txt"
	fi
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
		gport=$port
		if [ "$parallel" = 1 ]; then
			gport=$((port + n))
		fi
		n=$((n + 1))
		# shellcheck disable=SC2086
		start_gateway "$file" "$gport" $args ${GATEWAY_ARGS:-}
		echo "== $label, seed $seed, port $gport: $(uptime)" | tee -a "$out/load.txt" >&2
		if [ "$parallel" = 1 ]; then
			# Started together below, once every gateway listens.
			loads="$loads $file:$label:$gport"
		else
			# shellcheck disable=SC2086
			"$bin/loadgen" -url "http://127.0.0.1:$gport" -rate "$rate" -duration "$duration" -seed "$seed" -retries 0 -quiet -json -label "$label" ${LOADGEN_ARGS:-} >"$out/$file.json" || true
			echo "   done: $(uptime)" >>"$out/load.txt"
			stop
		fi
		set -- "$@" "$out/$file.json"
	done
	if [ "$parallel" = 1 ]; then
		pids=
		for l in $loads; do
			file=${l%%:*} rest=${l#*:}
			label=${rest%%:*} gport=${rest#*:}
			# shellcheck disable=SC2086
			"$bin/loadgen" -url "http://127.0.0.1:$gport" -rate "$rate" -duration "$duration" -seed "$seed" -retries 0 -quiet -json -label "$label" ${LOADGEN_ARGS:-} >"$out/$file.json" &
			pids="$pids $!"
		done
		for q in $pids; do
			wait "$q" || true
		done
		echo "== seed $seed done: $(uptime)" | tee -a "$out/load.txt" >&2
		stop
	fi
done
# The table on stdout, the plots beside the reports (loadgen -frontier; exits non-zero, after
# the table, if a report is missing or unreadable).
"$bin/loadgen" -frontier "$out" -title "admission frontier: $rate sessions/s, TTL $ttl, $inflight in flight" "$@"
