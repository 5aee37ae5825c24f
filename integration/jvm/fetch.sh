#!/usr/bin/env bash
# Fetch the pinned JVM jars the interop stage and the Iceberg REST fixture need, from Maven Central,
# into a git-ignored cache; print nothing else on stdout but what --classpath asks for.
#
#   integration/jvm/fetch.sh [SET...]            fetch SETs (default: spark rest); idempotent
#   integration/jvm/fetch.sh --classpath SET     fetch if needed, then print SET's classpath (':'-separated)
#
# Sets (one POM each, versions from integration/jvm/versions.env; nothing is built from the POMs):
#   spark  integration/jvm/spark-pom.xml: Iceberg's Spark runtime, iceberg-aws-bundle, hadoop-aws +
#          s3-transfer-manager, the SQLite and PostgreSQL JDBC drivers (direct dependencies only)
#   rest   integration/jvm/rest-pom.xml: the Iceberg REST catalog fixture's classpath (transitive),
#          plus integration/jvm/LoopbackRESTCatalogServer.java compiled against it (needs javac)
#
# Jars live once, in the cache's own Maven repository ($CACHE/m2, `mvn -Dmaven.repo.local`); a set is
# a classpath file listing them ($CACHE/SET.classpath) and a stamp: a hash of versions.env, the POM
# (and the launcher's source). When the stamp matches and every listed jar exists, nothing runs (no
# Maven start-up): a second call takes milliseconds. Concurrent calls serialize on a lock file.
#
# Env: FENCEDLAKE_JVM_CACHE (default .jvm in the checkout), MVN (default mvn), FENCEDLAKE_JVM_OFFLINE=1
#      (mvn -o: only the local Maven repository). Needs Maven 3.6+ and a JDK 17 (javac for `rest`): on a
#      Debian machine without them it installs `maven` / `openjdk-17-jdk-headless` with apt-get (as root
#      or through sudo), as integration/services/postgres.sh does for PostgreSQL.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/integration/jvm"
CACHE="${FENCEDLAKE_JVM_CACHE:-$ROOT/.jvm}"
case "$CACHE" in /*) ;; *) CACHE="$ROOT/$CACHE" ;; esac
MVN="${MVN:-mvn}"
# maven-dependency-plugin 2.8 is what Maven 3.8's super-POM binds `dependency:`: pinned so that a newer
# Maven resolves the same way (3.x pulls ~40 more plugin artifacts on a cold cache: ~50 s here).
PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:2.8

log() { printf '[jvm] %s\n' "$*" >&2; }
die() { printf '[jvm] ERROR: %s\n' "$*" >&2; exit 1; }

# The -Dkey=value properties the POMs use, from versions.env (KEY_NAME=v -> -Dkey.name=v).
maven_properties() {
    local key value
    while IFS='=' read -r key value; do
        case "$key" in '' | \#*) continue ;; esac
        key="$(printf '%s' "${key%_VERSION}" | tr 'A-Z_' 'a-z.')"
        case "$key" in spark.minor | scala.binary) ;; *) key="$key.version" ;; esac
        printf -- '-D%s=%s\n' "$key" "$value"
    done <"$HERE/versions.env"
}

ensure_tool() {  # ensure_tool COMMAND DEBIAN_PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    command -v apt-get >/dev/null 2>&1 || die "'$1' not found and no apt-get: install $2 (Maven 3.6+, a JDK 17)"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || die "'$1' not found and not root: install the '$2' package"
        sudo=(sudo)
    fi
    log "'$1' not found: installing $2 from Debian (apt-get update + install)"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$2" >&2
    command -v "$1" >/dev/null 2>&1 || die "installed $2 but '$1' is still not on PATH"
}

stamp_of() {  # stamp_of SET -> hash of everything the set is made from
    local files=("$HERE/versions.env" "$HERE/$1-pom.xml")
    [ "$1" = rest ] && files+=("$HERE/LoopbackRESTCatalogServer.java")
    cat "${files[@]}" | sha256sum | cut -d' ' -f1
}

is_current() {  # is_current SET: stamp matches and every jar on the classpath exists
    local set="$1" cp jar
    [ -f "$CACHE/$set.stamp" ] && [ "$(cat "$CACHE/$set.stamp")" = "$(stamp_of "$set")" ] || return 1
    cp="$(cat "$CACHE/$set.classpath" 2>/dev/null)" || return 1
    [ -n "$cp" ] || return 1
    IFS=':' read -r -a jars <<<"$cp"
    for jar in "${jars[@]}"; do
        [ -e "$jar" ] || return 1
    done
}

fetch_set() {
    local set="$1"
    local pom="$HERE/$set-pom.xml"
    [ -f "$pom" ] || die "unknown set '$set' (want: spark rest)"
    if is_current "$set"; then
        return 0
    fi
    [ "$MVN" = mvn ] && ensure_tool mvn maven
    command -v "$MVN" >/dev/null 2>&1 || die "Maven ('$MVN') not found"
    local t0=$SECONDS
    local args=(-B -q -Dstyle.color=never -Dmaven.repo.local="$CACHE/m2" -f "$pom")
    [ "${FENCEDLAKE_JVM_OFFLINE:-0}" = 1 ] && args+=(-o)
    mapfile -t props < <(maven_properties)
    local extra=()
    [ "$set" = spark ] && extra+=(-DexcludeTransitive=true)
    log "fetching set '$set' from Maven Central into $CACHE/m2 ..."
    local tmp="$CACHE/$set.classpath.tmp"
    # Maven 3.8 prints ANSI resets even in batch mode: strip them (pipefail keeps mvn's status).
    "$MVN" "${args[@]}" "${props[@]}" "${extra[@]}" "$PLUGIN:build-classpath" -Dmdep.outputFile="$tmp" 2>&1 \
        | sed -u 's/\x1b\[[0-9;]*m//g' >&2 \
        || die "mvn could not resolve set '$set' (is Maven Central reachable? see the output above)"
    if [ "$set" = rest ]; then
        ensure_tool javac openjdk-17-jdk-headless
        rm -rf "$CACHE/rest-launcher"
        javac -nowarn -d "$CACHE/rest-launcher" -cp "$(cat "$tmp")" "$HERE/LoopbackRESTCatalogServer.java" >&2 \
            || die "javac failed on LoopbackRESTCatalogServer.java"
        printf ':%s' "$CACHE/rest-launcher" >>"$tmp"
    fi
    mv "$tmp" "$CACHE/$set.classpath"
    stamp_of "$set" >"$CACHE/$set.stamp"
    local n mb
    n="$(tr ':' '\n' <"$CACHE/$set.classpath" | grep -c '\.jar$')"
    mb="$(tr ':' '\n' <"$CACHE/$set.classpath" | grep '\.jar$' | xargs du -cm | tail -1 | cut -f1)"
    log "set '$set': $n jars, $mb MB, in $((SECONDS - t0)) s"
}

mode=fetch
if [ "${1:-}" = --classpath ]; then
    mode=classpath
    shift
    [ "$#" -eq 1 ] || die "usage: $0 --classpath SET"
fi
sets=("$@")
[ "${#sets[@]}" -gt 0 ] || sets=(spark rest)

mkdir -p "$CACHE"
exec 9>"$CACHE/.fetch.lock"
flock 9
for set in "${sets[@]}"; do
    fetch_set "$set"
done
if [ "$mode" = classpath ]; then
    cat "$CACHE/${sets[0]}.classpath"
    echo
fi
