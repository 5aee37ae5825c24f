# Shared by the integration services' scripts (sourced, not run): start a server in the
# background on loopback, wait for its ready file, stop it by its PID file.
#
# The caller sets, before sourcing:
#   NAME      short name for log lines            (e.g. azurite)
#   DIR       state directory                     (PID file, ready file, log)
#   MATCH     text the server's command line must contain (a stale PID file may name
#             an unrelated process after a reboot: never signal that)
#   HOST PORT where it listens
# and calls `daemon_start CMD...` (the command must write "$READY" once it serves, or the
# caller passes a readiness probe as DAEMON_PROBE, a shell command that succeeds when up;
# DAEMON_WAIT_S bounds the wait, default 60),
# `daemon_stop`, `daemon_status`.

PIDFILE="$DIR/$NAME.pid"
READY="$DIR/ready"
LOG="$DIR/$NAME.log"

log() { printf '[%s] %s\n' "$NAME" "$*"; }
die() { printf '[%s] ERROR: %s\n' "$NAME" "$*" >&2; exit 1; }

running_pid() {
    [ -f "$PIDFILE" ] || return 1
    local pid
    pid="$(cat "$PIDFILE")"
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$MATCH" || return 1
    echo "$pid"
}

is_ready() {
    if [ -n "${DAEMON_PROBE:-}" ]; then
        eval "$DAEMON_PROBE" >/dev/null 2>&1
    else
        [ -f "$READY" ]
    fi
}

daemon_start() {  # daemon_start CMD... ; returns 1 if it was already running
    local pid
    if pid="$(running_pid)"; then
        log "already running (pid $pid) on $HOST:$PORT"
        return 1
    fi
    if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
        die "port $PORT on $HOST is taken by another process: set the port variable (see the script's header)"
    fi
    mkdir -p "$DIR"
    rm -f "$READY" "$PIDFILE"
    log "starting on $HOST:$PORT (log: $LOG)"
    local t0=$SECONDS
    # setsid: the server outlives this shell and is not hit by the caller's Ctrl-C.
    setsid "$@" >>"$LOG" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 $((${DAEMON_WAIT_S:-60} * 5))); do  # up to DAEMON_WAIT_S (60) s
        is_ready && break
        if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
            tail -n 30 "$LOG" >&2 || true
            die "$NAME exited during start-up (log above: $LOG)"
        fi
        sleep 0.2
    done
    is_ready || { tail -n 30 "$LOG" >&2 || true; daemon_stop; die "$NAME not ready after ${DAEMON_WAIT_S:-60} s"; }
    log "ready in $((SECONDS - t0)) s: pid $(cat "$PIDFILE")"
}

daemon_stop() {
    local pid
    if ! pid="$(running_pid)"; then
        log "not running"
        rm -f "$PIDFILE" "$READY"
        return 0
    fi
    log "stopping pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do  # up to 10 s, then SIGKILL
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid ignored SIGTERM; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PIDFILE" "$READY"
    log "stopped"
}

daemon_status() {
    local pid
    if pid="$(running_pid)" && is_ready; then
        log "running: pid $pid, $HOST:$PORT"
        return 0
    fi
    log "not running"
    return 3
}
