# procs.sh — shell helpers the process scripts (calibrate.sh, lora-processes.sh,
# latency-processes.sh) source.

# started LINE_PREFIX LOGFILE: waits up to 10 s for a process's "LINE_PREFIX listening on
# http://..." line and prints the URL; fails with the log when none comes.
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

# build_tools [EXTRA_PACKAGE...]: builds simserver, the gateway and loadgen (and any extra
# packages, each named after its last path element) into $bin, a temporary directory; at exit
# the script's children are stopped and $bin removed.
build_tools() {
	bin=$(mktemp -d)
	trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$bin"' EXIT
	for pkg in ./internal/glue/simfleet/cmd/simserver ./examples/gateway ./examples/loadgen "$@"; do
		go build -o "$bin/$(basename "$pkg")" "$pkg"
	done
}
