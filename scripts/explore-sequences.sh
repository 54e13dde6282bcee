#!/usr/bin/env bash
# Runs proxy/'s random-sequence tests (each compares rproxy with Redis, or a
# cluster through rproxy with one Redis) with seeds other than make test's,
# to look for sequences where they differ. Usage:
#   scripts/explore-sequences.sh [FIRST_SEED [LAST_SEED]]
# EXPLORE_RUN: the tests (a -run regexp; default every random-sequence test).
# EXPLORE_OUT: where each failing seed's log goes (default suites/out/explore).
# EXPLORE_BUILD: more go test flags for the test binary (-race, say).
# Stops at nothing: every seed runs, and the failing ones are listed at the end.
set -u
cd "$(dirname "$0")/.."
first=${1:-1}
last=${2:-$first}
run=${EXPLORE_RUN:-'RandomSequences|LongSessions'}
out=${EXPLORE_OUT:-suites/out/explore}
mkdir -p "$out"
bin=$(mktemp -d)/proxy.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
# shellcheck disable=SC2086 # EXPLORE_BUILD is a list of flags
go test -c ${EXPLORE_BUILD:-} -o "$bin" ./proxy || exit 1
failed=()
for seed in $(seq "$first" "$last"); do
	log="$out/seed-$seed.log"
	if (cd proxy && RPROXY_SEQUENCE_SEED=$seed "$bin" -test.run "$run" -test.count 1 -test.timeout 20m) >"$log" 2>&1; then
		echo "seed $seed: ok"
		rm -f "$log"
	else
		echo "seed $seed: FAILED ($log)"
		failed+=("$seed")
	fi
done
echo "failing seeds: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
