#!/usr/bin/env bash
# Regenerates bench/BENCHMARKS.md: runs the hot-path benchmarks COUNT times each (default 6)
# and the gateway's overhead measurement, then writes the page with bench/cmd/benchpage.
# Run it on a quiet machine; the raw output is kept in bench/benchmarks-raw.txt for benchstat.
#
#	bench/benchmarks.sh            # the whole page (about 10 minutes on 2 cores)
#	OVERHEAD=0 bench/benchmarks.sh # without the gateway overhead run
set -euo pipefail
cd "$(dirname "$0")/.."

count=${COUNT:-6}
benchtime=${BENCHTIME:-300ms}
raw=bench/benchmarks-raw.txt
extra=$(mktemp)
trap 'rm -f "$extra"' EXIT

cmd="go test -run '^\$' -benchmem -count $count -benchtime $benchtime -bench <pattern> <package>"
: >"$raw"
bench() { # package pattern
	echo "== $1 $2" >&2
	go test -run '^$' -benchmem -count "$count" -benchtime "$benchtime" -bench "$2" "$1" | tee -a "$raw" | grep -E '^(Benchmark|FAIL|ok)' >&2
}
bench ./prefixcache 'HashTokens|Match$|Insert$'
bench ./prefixcache/kvevents 'Decode|ApplyEvents'
bench ./routing 'Pick$|PickParts|PickInsert|PickProfiles|PickLatency'
bench ./routing/outlier 'PickOutlier$'
bench ./routing/latency 'Linear'
bench ./flowcontrol 'AdmitDone$|AdmitParallel'
bench ./fairness 'Policy$'
bench ./metrics 'ScrapeParse'
bench ./proxy/openai 'Parse$'
bench ./proxy/e2e 'Handler'

{
	echo "Go: $(go version | awk '{print $3}'); $(nproc) CPUs; load average at the start: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)."
	echo
	echo "Raw output: \`bench/benchmarks-raw.txt\` (compare two with benchstat)."
} >"$extra"
if [ "${OVERHEAD:-1}" != 0 ]; then
	echo "== gateway overhead (go run ./examples/loadgen -overhead)" >&2
	{
		echo
		echo "### Gateway overhead"
		echo
		echo "\`go run ./examples/loadgen -overhead -floor\` (one simulated server, the gateway in front of it and"
		echo "a bare httputil.ReverseProxy beside it, the same load at all three at once; each proxy's CPU from"
		echo "its own process):"
		echo
		echo '```'
		go run ./examples/loadgen -overhead -floor 2>&1 | tail -n 29
		echo '```'
	} >>"$extra"
fi
go run ./bench/cmd/benchpage -command "$cmd" -extra "$extra" "$raw" >bench/BENCHMARKS.md
echo "wrote bench/BENCHMARKS.md" >&2
