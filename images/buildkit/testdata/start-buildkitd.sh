#!/usr/bin/env bash
# Starts what TestBuildkitEquivalence needs, as root:
#   - containerd (Debian's 1.6.20: apt-get install -y containerd runc), unless
#     its socket already answers;
#   - buildkitd v0.34.2 with only a containerd worker, in containerd namespace
#     hookbox, built from tools/buildkitd into bin/buildkitd when missing.
# Prints the variables the test reads, for eval:
#   eval "$(images/buildkit/testdata/start-buildkitd.sh)"
# `start-buildkitd.sh stop` ends the daemons this script started (by pid).
#
# Logs and pid files go to $HOOKBOX_BUILDKIT_STATE (default /tmp/hookbox-buildkit).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../../.." && pwd)
state=${HOOKBOX_BUILDKIT_STATE:-/tmp/hookbox-buildkit}
containerd_sock=${HOOKBOX_CONTAINERD_ADDRESS:-/run/containerd/containerd.sock}
buildkit_sock=/run/buildkit/buildkitd.sock
mkdir -p "$state"

say() { echo "start-buildkitd: $*" >&2; }

if [ "${1:-}" = stop ]; then
	for d in buildkitd containerd; do
		if [ -f "$state/$d.pid" ]; then
			pid=$(cat "$state/$d.pid")
			kill "$pid" 2>/dev/null && say "stopped $d ($pid)" || true
			rm -f "$state/$d.pid"
		fi
	done
	exit 0
fi

[ "$(id -u)" = 0 ] || { say "must run as root"; exit 1; }
for cmd in containerd runc ctr; do
	command -v "$cmd" >/dev/null || { say "$cmd missing: apt-get install -y containerd runc"; exit 1; }
done

# wait_for SECONDS NAME COMMAND...: poll COMMAND every 0.1 s while the
# daemon NAME (pid in $state/NAME.pid) lives.
wait_for() {
	local timeout=$1 name=$2
	local deadline=$((SECONDS + timeout)) pid
	pid=$(cat "$state/$name.pid")
	shift 2
	until "$@" >/dev/null 2>&1; do
		if ! kill -0 "$pid" 2>/dev/null; then
			say "$name exited; end of $state/$name.log:"
			head -n 5 "$state/$name.log" >&2
			rm -f "$state/$name.pid"
			exit 1
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			say "$name not ready after ${timeout}s; log in $state/$name.log"
			exit 1
		fi
		sleep 0.1
	done
}

if ctr --address "$containerd_sock" version >/dev/null 2>&1; then
	say "containerd already answers on $containerd_sock"
else
	say "starting containerd on $containerd_sock"
	containerd --address "$containerd_sock" >"$state/containerd.log" 2>&1 &
	echo $! >"$state/containerd.pid"
	wait_for 30 containerd ctr --address "$containerd_sock" version
fi

buildkitd="$repo/bin/buildkitd"
if [ ! -x "$buildkitd" ]; then
	say "building $buildkitd (a few minutes)"
	(cd "$repo/tools/buildkitd" && go build -o "$buildkitd" github.com/moby/buildkit/cmd/buildkitd)
fi

if [ -f "$state/buildkitd.pid" ] && kill -0 "$(cat "$state/buildkitd.pid")" 2>/dev/null; then
	say "buildkitd already running (pid $(cat "$state/buildkitd.pid"))"
else
	say "starting buildkitd on unix://$buildkit_sock"
	mkdir -p "$(dirname "$buildkit_sock")"
	: >"$state/buildkitd.log"
	"$buildkitd" \
		--oci-worker=false \
		--containerd-worker=true \
		--containerd-worker-addr "$containerd_sock" \
		--containerd-worker-namespace hookbox \
		--addr "unix://$buildkit_sock" \
		>"$state/buildkitd.log" 2>&1 &
	echo $! >"$state/buildkitd.pid"
	wait_for 60 buildkitd grep -q "running server on $buildkit_sock" "$state/buildkitd.log"
fi

echo "export HOOKBOX_BUILDKIT_ADDR=unix://$buildkit_sock"
echo "export HOOKBOX_CONTAINERD_ADDRESS=$containerd_sock"
