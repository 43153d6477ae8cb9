#!/usr/bin/env bash
# The rootless pass of the integration suite (make test-rootless), as root:
# creates a non-root user, prepares a delegated cgroup2 subtree for it
# (hookbox rootless setup), starts the tracer helper (hookbox tracer
# serve), then runs the Rootless* tests as that user inside the subtree.
# hookbox starts the user's rootless containerd under rootlesskit itself.
set -euo pipefail
cd "$(dirname "$0")/../.."

user=${HOOKBOX_ROOTLESS_USER:-hookbox-ci}
if [ "$(id -u)" != 0 ]; then
	echo "rootless.sh runs as root: it creates $user and a cgroup subtree for it" >&2
	exit 2
fi
for tool in rootlesskit newuidmap; do
	command -v "$tool" >/dev/null || {
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rootlesskit uidmap >/dev/null
		break
	}
done
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
grep -q "^$user:" /etc/subuid || usermod --add-subuids 200000-265535 --add-subgids 200000-265535 "$user"

work=$(mktemp -d /var/tmp/hookbox-rootless-XXXXXX)
chmod 755 "$work"
helper_pid=
cleanup() {
	[ -n "$helper_pid" ] && kill "$helper_pid" 2>/dev/null && wait "$helper_pid" 2>/dev/null
	# The user's rootless containerd (and RootlessKit) end with the pass.
	pkill -u "$user" rootlesskit 2>/dev/null || true
	sleep 1
	pkill -9 -u "$user" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

export CGO_ENABLED=0
go build -tags hookbox_lite -o "$work/hookbox" ./cmd/hookbox
go build -o "$work/hookbox-kube" ./cmd/hookbox
go build -o "$work/hookbox-init" ./cmd/hookbox-init
go build -o "$work/hookbox-seed" ./cmd/hookbox-seed
go build -o "$work/hookbox-scripted-engine" ./cmd/hookbox-scripted-engine
go build -o "$work/probe" ./integration/probe
go test -c -o "$work/integration.test" ./integration
chmod 755 "$work"/*

socket="$work/tracer/tracer.sock"
"$work/hookbox" tracer serve --socket "$socket" 2>"$work/tracer.log" &
helper_pid=$!
for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.1; done
[ -S "$socket" ] || { cat "$work/tracer.log"; echo "tracer helper did not start" >&2; exit 1; }

status=0
# The root pass's knobs (its containerd address, …) are not the user's.
(cd "$work" && "$work/hookbox" rootless setup --user "$user" -- env \
	-u HOOKBOX_CONTAINERD_ADDRESS -u HOOKBOX_SYSTEM_CONTAINERD_ADDRESS -u HOOKBOX_RUNTIME_DIR \
	-u HOOKBOX_REQUIRE_ROOT -u HOOKBOX_REQUIRE_BUILDKIT -u HOOKBOX_BUILDKIT_ADDR \
	HOOKBOX_INTEGRATION=1 HOOKBOX_ROOTLESS=1 HOOKBOX_TEST_BIN_DIR="$work" \
	HOOKBOX_TRACER_SOCKET="$socket" TMPDIR=/var/tmp \
	"$work/integration.test" -test.run "${HOOKBOX_ROOTLESS_RUN:-^TestRootless}" -test.skip '^TestRootlessUndelegated$' -test.count=1 -test.v -test.timeout 15m) || status=$?
# Second phase: the same user outside the delegated subtree (plain
# runuser keeps root's cgroup): runs without a cgroup of their own.
if [ $status = 0 ]; then
	(cd "$work" && runuser -u "$user" -- env -i PATH="$PATH" HOME="$(getent passwd "$user" | cut -d: -f6)" \
		XDG_RUNTIME_DIR="/run/user/$(id -u "$user")" TMPDIR=/var/tmp \
		HOOKBOX_INTEGRATION=1 HOOKBOX_ROOTLESS=1 HOOKBOX_ROOTLESS_UNDELEGATED=1 HOOKBOX_TEST_BIN_DIR="$work" \
		HOOKBOX_TRACER_SOCKET="$socket" \
		"$work/integration.test" -test.run '^TestRootlessUndelegated$' -test.count=1 -test.v -test.timeout 5m) || status=$?
fi
echo "--- tracer helper log"
cat "$work/tracer.log"
exit $status
