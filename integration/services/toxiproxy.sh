#!/usr/bin/env bash
# Shopify's toxiproxy (a TCP proxy whose links take latency, resets, cut responses, stalls and
# partitions on command) for the network fault suite and the latency benchmarks, on loopback.
# The binary is built from the Go module proxy with the Go toolchain, once, and cached.
#
#   integration/services/toxiproxy.sh install|start|stop|status|bin
#
# install: `go install github.com/Shopify/toxiproxy/v2/cmd/server@$VERSION` into
#   $FENCEDLAKE_IT_STATE/bin (~1-3 min the first time, then a file check). Exits 3 with a message
#   naming the missing tool when `go` is not on PATH (callers skip on 3, fail on anything else).
# start: install, then run the server with its HTTP API on 127.0.0.1:$FENCEDLAKE_IT_TOXIPROXY_PORT.
#   It starts with no proxies: clients create them (integration/faults/toxiproxy.py), listening on
#   ports from FENCEDLAKE_IT_TOXIPROXY_LISTEN (a range, "FIRST-LAST").
# bin: print the binary's path (after install).
#
# Env: FENCEDLAKE_IT_TOXIPROXY_PORT (24340), FENCEDLAKE_IT_TOXIPROXY_LISTEN (24341-24360; read by the
#      Python client), FENCEDLAKE_TOXIPROXY_BIN (use this binary, build nothing),
#      FENCEDLAKE_IT_STATE (.integration).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NAME=toxiproxy
HOST=127.0.0.1
PORT="${FENCEDLAKE_IT_TOXIPROXY_PORT:-24340}"
STATE="${FENCEDLAKE_IT_STATE:-$ROOT/.integration}"
DIR="$STATE/toxiproxy"
# Pinned: the newest release the Go module proxy serves here (it lists v2.3.0 and v2.5.0).
VERSION=v2.5.0
MODULE=github.com/Shopify/toxiproxy/v2/cmd/server
BIN="${FENCEDLAKE_TOXIPROXY_BIN:-$STATE/bin/toxiproxy-server-$VERSION}"
MATCH="$BIN"
DAEMON_PROBE="(exec 3<>/dev/tcp/$HOST/$PORT)"
DAEMON_WAIT_S=30
# shellcheck source=daemon.sh
. "$ROOT/integration/services/daemon.sh"

install() {
    [ -x "$BIN" ] && return 0
    [ -z "${FENCEDLAKE_TOXIPROXY_BIN:-}" ] || die "FENCEDLAKE_TOXIPROXY_BIN=$BIN is not an executable file"
    if ! command -v go >/dev/null 2>&1; then
        printf '[%s] SKIP: the Go toolchain (`go`) is not on PATH: it builds toxiproxy (%s@%s); install Go or set FENCEDLAKE_TOXIPROXY_BIN\n' \
            "$NAME" "$MODULE" "$VERSION" >&2
        exit 3
    fi
    local gobin t0=$SECONDS
    gobin="$(mktemp -d "$STATE/bin.XXXXXX" 2>/dev/null || { mkdir -p "$STATE" && mktemp -d "$STATE/bin.XXXXXX"; })"
    log "building $MODULE@$VERSION with $(go version | cut -d' ' -f3) (once; cached as $BIN)"
    if ! GOBIN="$gobin" GOFLAGS=-mod=mod go install "$MODULE@$VERSION" >"$gobin/build.log" 2>&1; then
        cat "$gobin/build.log" >&2
        rm -rf "$gobin"
        die "go install $MODULE@$VERSION failed (output above)"
    fi
    mkdir -p "$(dirname "$BIN")"
    mv "$gobin/server" "$BIN"  # the module builds a binary named `server`; the cached name says what it is
    rm -rf "$gobin"
    log "built in $((SECONDS - t0)) s"
}

start() {
    install
    if pid="$(running_pid)"; then
        log "already running (pid $pid) on $HOST:$PORT"
        return 0
    fi
    daemon_start "$BIN" -host "$HOST" -port "$PORT"
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    stop) daemon_stop ;;
    status) daemon_status ;;
    bin) install && echo "$BIN" ;;
    *) echo "usage: $0 install|start|stop|status|bin" >&2; exit 2 ;;
esac
