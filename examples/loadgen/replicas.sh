#!/bin/sh
# replicas.sh — gateway replicas on real processes: four simulated vLLM-compatible servers,
# Redis, and the same loadgen schedule (agentic sessions, requests spread over the gateways in
# turn as a Service without affinity would) against one gateway, three gateways sharing
# nothing, and three gateways sharing through Redis — then again with Redis killed (-9) in the
# middle of the run and restarted. Prints one line per run: requests, errors, later turns'
# prefix hit rate, TTFT. Needs redis-server. Run from the repository root:
#
#	sh examples/loadgen/replicas.sh [OUT_DIR]
#
# Environment: RATE (sessions/s, default 3), DURATION (default 40s), PROFILE (the simulated
# servers', default demo), REDIS_PORT (default 16379), BASE_PORT (default 18100).
set -eu
out=${1:-replicas-out}
rate=${RATE:-3}
duration=${DURATION:-40s}
profile=${PROFILE:-demo}
rport=${REDIS_PORT:-16379}
base=${BASE_PORT:-18100}
mkdir -p "$out"
bin=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	rm -rf "$bin"
}
trap cleanup EXIT
go build -o "$bin/gateway" ./examples/gateway
go build -o "$bin/simserver" ./internal/glue/simfleet/cmd/simserver
go build -o "$bin/loadgen" ./examples/loadgen

startredis() {
	redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$out/redis.log" 2>&1 &
	redis=$!
	pids="$pids $redis"
	for _ in $(seq 50); do
		if ! kill -0 "$redis" 2>/dev/null; then
			echo "redis-server did not start (port $rport taken? set REDIS_PORT):" >&2
			cat "$out/redis.log" >&2
			exit 1
		fi
		redis-cli -p "$rport" ping >/dev/null 2>&1 && return
		sleep 0.1
	done
	echo "redis-server did not answer" >&2
	exit 1
}

backends=""
for i in 1 2 3 4; do
	port=$((base + i))
	"$bin/simserver" -listen "127.0.0.1:$port" -profile "$profile" >"$out/sim$i.log" 2>&1 &
	pids="$pids $!"
	backends="$backends -backend http://127.0.0.1:$port"
done
startredis

# gateways N ARGS...: starts N gateways (ports base+11..), sets $urls and $gws.
gateways() {
	n=$1
	shift
	urls=""
	gws=""
	for i in $(seq "$n"); do
		port=$((base + 10 + i))
		# shellcheck disable=SC2086
		"$bin/gateway" -listen "127.0.0.1:$port" -replica-id "gw$i" $backends "$@" >"$out/gw$i.log" 2>&1 &
		gws="$gws $!"
		urls="$urls${urls:+,}http://127.0.0.1:$port"
		for _ in $(seq 100); do grep -qs "listening on" "$out/gw$i.log" && break; sleep 0.1; done
	done
	pids="$pids $gws"
	sleep 1 # a scrape, and the replicas' first exchange
}

stop() {
	for p in $gws; do kill "$p" 2>/dev/null || true; done
	sleep 0.5
}

run() { # run LABEL: loadgen against $urls
	"$bin/loadgen" -url "$urls" -rate "$rate" -duration "$duration" -retries 0 -quiet -json -label "$1" >"$out/$1.json" || true
}

gateways 1
run one
stop
gateways 3
run three-alone
stop
gateways 3 -redis "127.0.0.1:$rport" -cluster "run-$$"
run three-synced
run three-synced-warm
# Redis dies a third into the next run and is back a third later.
secs=${duration%s}
( sleep $((secs / 3)); kill -9 "$redis"; sleep $((secs / 3)); redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >>"$out/redis.log" 2>&1 & echo $! >"$out/redis.pid" ) &
run three-redis-killed
sleep 1
curl -s "http://127.0.0.1:$((base + 11))/metrics" | grep '^usher_replica_sync' >"$out/metrics-after.txt" || true
[ -f "$out/redis.pid" ] && pids="$pids $(cat "$out/redis.pid")"
stop

set --
for r in one three-alone three-synced three-synced-warm three-redis-killed; do set -- "$@" "$out/$r.json"; done
"$bin/loadgen" -table "$@"
echo
echo "replica gw1 after the Redis restart:"
cat "$out/metrics-after.txt"
