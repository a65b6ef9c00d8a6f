#!/bin/sh
# gittins-curves.sh — the Gittins policy's learned distribution of a session's service against
# the true one (bench/README.md, "Task completion time"): writes the sessions of trace-sessions
# and increasing-hazard, lets the fairness test TestGittinsLearnedCurves drive a Gittins policy
# through a real queue on them (2,000 ended sessions of one, then 2,000 of the other) and record
# what it learned, and draws bench/plots/gittins-learned-*.png. Run from the repository root:
#
#	sh bench/gittins-curves.sh [OUT_DIR]
set -eu
out=${1:-bench/plots}
mkdir -p "$out"
out=$(cd "$out" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(cd bench && go run ./cmd/gittinscurves sessions "$dir")
USHER_GITTINS_CURVES=$dir go test ./fairness -run '^TestGittinsLearnedCurves$' -count=1 -v | grep -E 'KS|ok|FAIL' >&2
(cd bench && go run ./cmd/gittinscurves plot "$dir" "$out")
