# shellcheck shell=bash
# scripts/_postgres.sh — a private PostgreSQL server for the store tests. SOURCE it after
# _env.sh, then call bai_setup_postgres; it exports BAI_TEST_POSTGRES_URL.
#
# As root on Debian/Ubuntu it installs the `postgresql` package when missing, then runs
# its own cluster (not the system's) as the `postgres` user, listening on a Unix socket
# only (no TCP port), under /tmp/bai-jupyter-postgres/<hash of this checkout>; started
# once and reused by later runs (fast when already up). Elsewhere, set
# BAI_TEST_POSTGRES_URL yourself (an SQLAlchemy URL of a database the tests may create
# databases in), or the PostgreSQL tests skip (and fail under CI=true).

_bai_pg_bin() {
    local found
    found="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    [ -n "$found" ] && [ -x "$found/initdb" ] && printf '%s\n' "$found"
}

bai_setup_postgres() {
    if [ -n "${BAI_TEST_POSTGRES_URL:-}" ]; then
        _bai_say "PostgreSQL: using BAI_TEST_POSTGRES_URL"
        return 0
    fi
    local bin
    if ! bin="$(_bai_pg_bin)"; then
        _bai_apt_install postgresql || return 1
        bin="$(_bai_pg_bin)" || { _bai_say "FAILED: no initdb after installing postgresql"; return 1; }
    fi
    if ! _bai_is_root || ! id postgres >/dev/null 2>&1; then
        _bai_say "PostgreSQL tests need root (to run a cluster as 'postgres') or BAI_TEST_POSTGRES_URL"
        return 1
    fi
    local key dir port=54329
    key="$(printf '%s' "$BAI_ROOT" | cksum | cut -d' ' -f1)"
    dir="/tmp/bai-jupyter-postgres/$key"
    mkdir -p "$dir" && chmod 755 /tmp/bai-jupyter-postgres "$dir" && chown postgres:postgres "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        _bai_say "initializing a private PostgreSQL cluster in $dir"
        _bai_quiet "$dir/initdb.log" runuser -u postgres -- "$bin/initdb" -D "$dir/data" \
            -A trust -U postgres -E UTF8 || return 1
    fi
    if ! runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        _bai_say "starting PostgreSQL (socket in $dir)"
        _bai_quiet "$dir/start.log" runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" \
            -o "-k $dir -p $port -c listen_addresses='' -c max_connections=200 -c fsync=off" \
            -l "$dir/server.log" -w start || return 1
    fi
    export BAI_TEST_POSTGRES_URL="postgresql+psycopg://postgres@/postgres?host=$dir&port=$port"
    _bai_say "PostgreSQL ready"
}
