#!/usr/bin/env bash
# bench/module.sh -- the Redis module's cost: Redis CPU per decision,
# decisions/s and memory per key, next to a bare SET ... PX (the ceiling for
# a one-command decision) and the classic hash token bucket in Lua.
#
#   bench/module.sh [BUILD_DIR]      (default: build)
#
# Starts its own redis-server on a free loopback port (always stopped) and
# drives it with redis-benchmark: 4 connections, pipelines of 64, random
# keys out of 100k.  Prints one "name: value" line per figure and a final
# JSON object.  Figures:
#   usec_per_call   Redis's own INFO commandstats time per call (the
#                   command only, as Redis reports it)
#   cpu_us_per_call whole redis-server process CPU (user+sys, network and
#                   protocol included) divided by the calls
#   per_s           decisions/s seen by redis-benchmark
#   bytes_per_key   used_memory growth over 100k 16-byte keys, each left
#                   holding a state with a TTL
# Environment: N (calls per run, default 500000), KEYS (default 100000).
set -euo pipefail

BUILD=${1:-build}
MODULE=$(realpath "$BUILD/sluice-redis.so")
N=${N:-500000}
KEYS=${KEYS:-100000}
[ -f "$MODULE" ] || { echo "missing $MODULE: run make first" >&2; exit 1; }

PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
DIR=$(mktemp -d)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
	--dir "$DIR" --logfile "$DIR/redis.log" --loadmodule "$MODULE" &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DIR"' EXIT
CLI=(redis-cli -p "$PORT")
for _ in $(seq 100); do "${CLI[@]}" ping >/dev/null 2>&1 && break; sleep 0.05; done

# The classic token bucket: a hash {tokens, ts} updated by a Lua script.
CLASSIC='local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local cap, rate, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local b = redis.call("HMGET", KEYS[1], "tokens", "ts")
local tokens, ts = tonumber(b[1]) or cap, tonumber(b[2]) or now
tokens = math.min(cap, tokens + math.max(0, now - ts) * rate / 1000)
local ok = 0
if tokens >= cost then tokens = tokens - cost; ok = 1 end
redis.call("HMSET", KEYS[1], "tokens", tokens, "ts", now)
redis.call("PEXPIRE", KEYS[1], math.ceil((cap - tokens) / rate * 1000) + 1000)
return {ok, math.floor(tokens)}'
SHA=$("${CLI[@]}" script load "$CLASSIC")

cpu_ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
HZ=$(getconf CLK_TCK)

# run NAME STATNAME ARGS...: one redis-benchmark run, prints the figures.
declare -A OUT
run() {
	local name=$1 stat=$2
	shift 2
	"${CLI[@]}" flushall >/dev/null
	"${CLI[@]}" config resetstat >/dev/null
	local c0 c1 rps usec
	c0=$(cpu_ticks)
	rps=$(redis-benchmark -p "$PORT" -n "$N" -c 4 -P 64 -r "$KEYS" --csv "$@" |
		tail -1 | cut -d, -f2 | tr -d '"')
	c1=$(cpu_ticks)
	usec=$("${CLI[@]}" info commandstats | tr -d '\r' |
		sed -n "s/^cmdstat_$stat:.*usec_per_call=\([0-9.]*\).*/\1/p")
	local cpu
	cpu=$(python3 -c "print(round(($c1-$c0)/$HZ*1e6/$N, 2))")
	printf '%-11s usec_per_call: %s  cpu_us_per_call: %s  per_s: %s\n' \
		"$name" "$usec" "$cpu" "${rps%.*}"
	OUT[$name]="{\"usec_per_call\": $usec, \"cpu_us_per_call\": $cpu, \"per_s\": ${rps%.*}"
}

# mem NAME CMDLINE: used_memory growth over KEYS keys of 16 bytes.
mem() {
	local name=$1 fmt=$2 m0 m1
	"${CLI[@]}" flushall >/dev/null
	m0=$("${CLI[@]}" info memory | tr -d '\r' | sed -n 's/^used_memory:\(.*\)/\1/p')
	python3 - "$KEYS" "$fmt" <<'PY' | "${CLI[@]}" --pipe >/dev/null
import sys
n, fmt = int(sys.argv[1]), sys.argv[2]
out = []
for i in range(n):
    args = [a.replace("KEY", "sluice:%09d" % i) for a in fmt.split()]
    out.append("*%d\r\n" % len(args) + "".join(
        "$%d\r\n%s\r\n" % (len(a), a) for a in args))
sys.stdout.write("".join(out))
PY
	m1=$("${CLI[@]}" info memory | tr -d '\r' | sed -n 's/^used_memory:\(.*\)/\1/p')
	local per=$(((m1 - m0) / KEYS))
	printf '%-11s bytes_per_key: %s (%s keys: %s)\n' "$name" "$per" \
		"$("${CLI[@]}" dbsize)" "$("${CLI[@]}" object encoding sluice:000000001)"
	OUT[$name]="${OUT[$name]}, \"bytes_per_key\": $per}"
}

echo "redis $("${CLI[@]}" info server | tr -d '\r' | sed -n 's/^redis_version://p'), $N calls, $KEYS keys, 4 conns x 64 pipelined"
run module sluice.take SLUICE.TAKE k:__rand_int__ 100 2/s
# 1 token every 10 us: every bucket is full again before its next call,
# so there is no key to read (the common case of a lightly used limiter).
run module_full sluice.take SLUICE.TAKE k:__rand_int__ 100 100000/s
run set set SET k:__rand_int__ 1796000000000000000 PX 100000
run classic evalsha EVALSHA "$SHA" 1 k:__rand_int__ 100 2 1
mem module "SLUICE.TAKE KEY 100 1/day"
mem set "SET KEY 1796000000000000000 PX 86400000"
mem classic "EVALSHA $SHA 1 KEY 100 0.001 1"
printf '{"module": %s, "module_full_buckets": %s}, "set_px": %s, "classic_lua": %s}\n' \
	"${OUT[module]}" "${OUT[module_full]}" "${OUT[set]}" "${OUT[classic]}"
