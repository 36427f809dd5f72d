# shellcheck shell=bash
# scripts/_env.sh — shared set-up for scripts/*. SOURCE it, don't execute it:
#
#     source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
#
# After sourcing:
#   * ROOT / BAI_ROOT  the repository root (absolute, symlinks resolved)
#   * .venv exists, has a working python, and holds `pip install -e ".[dev,lab,hub]"`
#   * the JupyterLab extension is built (when labextension/ changed) and enabled
#   * PATH starts with $ROOT/.venv/bin, VIRTUAL_ENV points at .venv
#   * a Docker engine answers and the default kernel image is built
#     (as root, installing docker.io/debootstrap when missing; see bai_setup_docker)
#
# Safe under `set -euo pipefail`. Does not change the caller's shell options or
# working directory. On failure it prints why (pip's full output included) and
# `return`s non-zero from `source`, so a caller running with `set -e` stops.
#
# Knobs (environment):
#   BAI_PYTHON         interpreter used to create .venv (default: python3)
#   BAI_FORCE_INSTALL  set to 1 to reinstall even when the stamp matches
#   BAI_SKIP_DOCKER    set to 1 to skip the Docker engine / kernel image set-up
#   BAI_DEBIAN_MIRROR  Debian mirror for the offline kernel image build
#   CI=true            makes a Docker set-up failure fatal (else: a warning)

# Progress lines go to stderr so stdout stays clean for the caller.
_bai_say() { printf '==> %s\n' "$*" >&2; }

# Run a command quietly; on failure dump its output and return its status.
_bai_quiet() {
    local log="$1"
    shift
    local rc=0
    "$@" >"$log" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then
        cat "$log" >&2
        _bai_say "FAILED (exit $rc): $*"
        _bai_say "full log: $log"
    fi
    return "$rc"
}

_bai_pyproject_hash() {
    # The venv's python is always there at this point: portable (no
    # sha256sum/shasum differences between Linux and macOS).
    "$BAI_ROOT/.venv/bin/python" - "$BAI_ROOT/pyproject.toml" <<'PY'
import hashlib, sys
with open(sys.argv[1], "rb") as f:
    print(hashlib.sha256(f.read()).hexdigest())
PY
}

# --- The JupyterLab extension (labextension/) --------------------------------
# Built into bai_jupyter/labextension/ (git-ignored) with jupyter-builder's jlpm,
# only when its sources changed (a hash of them is the stamp), and linked into
# .venv/share/jupyter/labextensions/bai-jupyter so a rebuild is live at once
# (an editable install would otherwise hold a copy made at install time).

_bai_labext_hash() {
    "$BAI_ROOT/.venv/bin/python" - "$BAI_ROOT/labextension" <<'PY'
import hashlib, sys
from pathlib import Path
root = Path(sys.argv[1])
files = [root / n for n in ("package.json", "yarn.lock", ".yarnrc.yml", "tsconfig.json")]
for sub in ("src", "style", "schema"):
    files += sorted(p for p in (root / sub).rglob("*") if p.is_file())
digest = hashlib.sha256()
for path in files:
    digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
print(digest.hexdigest())
PY
}

# Where Jupyter finds the extension in .venv.
_bai_labext_link() {
    printf '%s\n' "$BAI_ROOT/.venv/share/jupyter/labextensions/bai-jupyter"
}

_bai_setup_labext() {
    local stamp="$BAI_ROOT/.venv/.bai-labext-stamp" out="$BAI_ROOT/bai_jupyter/labextension"
    local log="$BAI_ROOT/.venv/.bai-labext.log" want have=""
    if ! command -v node >/dev/null 2>&1; then
        _bai_say "FAILED: no node (Node.js 20 or newer builds the JupyterLab extension)"
        return 1
    fi
    want="$(_bai_labext_hash)" || return 1
    [ -f "$stamp" ] && have="$(cat "$stamp")"
    if [ "$want" != "$have" ] || [ ! -f "$out/package.json" ]; then
        _bai_say "building the JupyterLab extension (labextension/ changed)"
        rm -f "$stamp"
        ( # its package.json scripts call jlpm and jupyter-builder from .venv
            export PATH="$BAI_ROOT/.venv/bin:$PATH"
            cd "$BAI_ROOT/labextension" &&
                _bai_quiet "$log" "$BAI_ROOT/.venv/bin/jlpm" install &&
                _bai_quiet "$log" "$BAI_ROOT/.venv/bin/jlpm" build
        ) || return 1
        printf '%s\n' "$want" >"$stamp"
    fi
    local link
    link="$(_bai_labext_link)"
    if [ "$(readlink "$link" 2>/dev/null)" != "$out" ]; then
        mkdir -p "$(dirname "$link")"
        rm -rf "$link"
        ln -s "$out" "$link"
    fi
}

# --- Docker engine + kernel image -------------------------------------------
# The `docker`-marked tests and the Docker agent backend need a Docker engine
# and the default kernel image (bai_jupyter/image/). On a fresh Debian/Ubuntu
# machine (CI) this installs Debian's docker.io and debootstrap, starts dockerd
# when nothing answers, and builds the image (offline with debootstrap when no
# registry is reachable, ~2 min once; cached by recipe hash afterwards).
# Fast (< 2 s) when everything is already there.

# Is there an engine that answers? (`docker version` is cheaper than `docker info`.)
_bai_docker_answers() {
    command -v docker >/dev/null 2>&1 &&
        docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

_bai_is_root() { [ "$(id -u)" = 0 ]; }

# apt-get install the given Debian packages, non-interactively, as root only.
_bai_apt_install() {
    if ! _bai_is_root; then
        _bai_say "missing: $* — install as root: sudo apt-get install -y $*"
        return 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        _bai_say "missing: $* — no apt-get here; install them with your system's package manager"
        return 1
    fi
    local log="$BAI_ROOT/.venv/.bai-apt.log"
    _bai_say "installing $* (apt-get)"
    _bai_quiet "$log" env DEBIAN_FRONTEND=noninteractive apt-get update || return 1
    _bai_quiet "$log" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -o Dpkg::Options::=--force-confold "$@" || return 1
}

# apt-get install packages that hold services without starting them: a policy-rc.d
# that says no (Debian's own switch, read by invoke-rc.d and deb-systemd-invoke) while
# they install, unless the machine has one already (as container images do).
_bai_apt_install_unstarted() {
    local policy=/usr/sbin/policy-rc.d made=0 rc=0
    if _bai_is_root && [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made=1
    fi
    _bai_apt_install "$@" || rc=$?
    if [ "$made" = 1 ]; then rm -f "$policy"; fi
    return "$rc"
}

# Start dockerd in the background (detached from this shell) and wait for it.
_bai_start_dockerd() {
    if ! _bai_is_root; then
        _bai_say "no Docker engine answers — start one (sudo systemctl start docker, or sudo dockerd &)," \
            "or let your user reach it (docker group / DOCKER_HOST)"
        return 1
    fi
    local log="$BAI_ROOT/.venv/dockerd.log" pid=""
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1 &&
        systemctl start docker >/dev/null 2>&1; then
        _bai_say "started docker.service"
        log=""
    else
        _bai_say "starting dockerd in the background (log: $log)"
        # setsid + nohup: the engine outlives this script and ignores its Ctrl-C.
        nohup setsid dockerd >"$log" 2>&1 </dev/null &
        pid=$!
    fi
    # Up to 30 s; 5 s more once our dockerd has exited (another one may be
    # starting at the same time: ours then loses the pidfile race).
    local tries=60
    while [ "$tries" -gt 0 ]; do
        if _bai_docker_answers; then
            _bai_say "Docker engine ready"
            return 0
        fi
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && [ "$tries" -gt 10 ]; then
            tries=10
        fi
        tries=$((tries - 1))
        sleep 0.5
    done
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
        _bai_say "FAILED: dockerd exited and no Docker engine answers"
    else
        _bai_say "FAILED: no Docker engine answered within 30 s"
    fi
    if [ -n "$log" ] && [ -f "$log" ]; then
        _bai_say "last lines of $log:"
        tail -n 20 "$log" >&2
    fi
    return 1
}

_bai_setup_docker_steps() {
    # 1. Tools: the docker CLI and an engine (unless one already answers,
    #    e.g. a remote DOCKER_HOST), and debootstrap for the offline image build.
    local missing=()
    if ! _bai_docker_answers; then
        if ! command -v docker >/dev/null 2>&1 || ! command -v dockerd >/dev/null 2>&1; then
            missing+=(docker.io)
        fi
    fi
    if ! command -v debootstrap >/dev/null 2>&1; then
        missing+=(debootstrap)
    fi
    # The browser tests drive the system's Chromium (never `playwright install`).
    if ! command -v chromium >/dev/null 2>&1; then
        missing+=(chromium)
    fi
    # The multi-node tests start their own sshd (ssh:// agents) and registry (PULLING),
    # and run the rsync client (rsync to a system session); the HA tests their own HAProxy:
    # installed, never started.
    local tools=()
    if [ ! -x /usr/sbin/sshd ]; then
        tools+=(openssh-server)
    fi
    if ! command -v docker-registry >/dev/null 2>&1; then
        tools+=(docker-registry)
    fi
    if ! command -v rsync >/dev/null 2>&1; then
        tools+=(rsync)
    fi
    # The HA tests put HAProxy in front of the manager replicas (they start their own).
    if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then
        tools+=(haproxy)
    fi
    if [ "${#tools[@]}" -gt 0 ]; then
        _bai_apt_install_unstarted "${tools[@]}" || true
    fi
    if [ "${#missing[@]}" -gt 0 ]; then
        _bai_apt_install "${missing[@]}" ||
            # Only docker.io is needed here: the image may be up to date, or a
            # registry reachable (the build says clearly if it needed debootstrap);
            # the tests that need the others fail under CI=true without them.
            [[ " ${missing[*]} " != *" docker.io "* ]] || return 1
    fi
    # 2. An engine that answers.
    if ! _bai_docker_answers; then
        _bai_start_dockerd || return 1
    fi
    # 3. The default kernel image (returns at once when up to date).
    "$BAI_ROOT/.venv/bin/python" -m bai_jupyter.image ensure || return 1
}

# Knob: BAI_SKIP_DOCKER=1 skips all of this (docker tests then skip, or fail under CI=true).
# With CI=true any failure is fatal; otherwise it is a warning and set-up goes on.
bai_setup_docker() {
    if [ "${BAI_SKIP_DOCKER:-0}" = 1 ]; then
        _bai_say "BAI_SKIP_DOCKER=1: not setting up Docker"
        return 0
    fi
    local rc=0
    _bai_setup_docker_steps || rc=$?
    if [ "$rc" -ne 0 ]; then
        if [ "${CI:-}" = true ]; then
            _bai_say "FAILED: Docker set-up (fatal with CI=true)"
            return "$rc"
        fi
        _bai_say "WARNING: Docker set-up failed; docker-marked tests will skip (fatal with CI=true)"
    fi
    return 0
}

_bai_setup() {
    local venv="$BAI_ROOT/.venv"
    local py="$venv/bin/python"
    local stamp="$venv/.bai-stamp"
    local log="$venv/.bai-pip.log"
    local created=0

    # Non-interactive pip, everywhere (CI=true or not).
    export PIP_NO_INPUT=1
    export PIP_DISABLE_PIP_VERSION_CHECK=1

    # 1. A venv whose python runs. Recreate a broken one (moved repo, deleted
    #    base interpreter, half-finished creation, ...).
    if [ -e "$venv" ] && ! "$py" -c 'import sys' >/dev/null 2>&1; then
        _bai_say "removing broken .venv ($py does not run)"
        rm -rf "$venv"
    fi
    if [ ! -e "$venv" ]; then
        _bai_say "creating .venv (${BAI_PYTHON:-python3})"
        if ! "${BAI_PYTHON:-python3}" -m venv "$venv"; then
            _bai_say "FAILED: ${BAI_PYTHON:-python3} -m venv $venv (on Debian/Ubuntu: apt-get install python3-venv)"
            rm -rf "$venv"
            return 1
        fi
        created=1
        _bai_say "upgrading pip"
        _bai_quiet "$log" "$py" -m pip install -q --upgrade pip || return 1
    fi

    # 2. The package, installed editable with its extras, only when
    #    pyproject.toml changed since the last successful install.
    local want have=""
    want="$(_bai_pyproject_hash)" || return 1
    if [ -f "$stamp" ]; then
        have="$(cat "$stamp")"
    fi
    if [ "$want" != "$have" ] || [ "${BAI_FORCE_INSTALL:-0}" = 1 ]; then
        local why="pyproject changed"
        if [ "$created" = 1 ]; then
            why="new .venv"
        elif [ -z "$have" ]; then
            why="no install stamp: first run or last install failed"
        elif [ "${BAI_FORCE_INSTALL:-0}" = 1 ] && [ "$want" = "$have" ]; then
            why="BAI_FORCE_INSTALL=1"
        fi
        _bai_say "installing bai-jupyter ($why)"
        rm -f "$stamp"
        # Never let pip write (or uninstall) through the link into the build output.
        if [ -L "$(_bai_labext_link)" ]; then rm -f "$(_bai_labext_link)"; fi
        _bai_quiet "$log" "$py" -m pip install -q -e "${BAI_ROOT}[dev,lab,hub]" || return 1
        printf '%s\n' "$want" >"$stamp"
        # The install's build hook has just built the JupyterLab extension.
        _bai_labext_hash >"$venv/.bai-labext-stamp" || return 1
    else
        _bai_say ".venv up to date"
    fi
    _bai_setup_labext || return 1

    _bai_setup_hub_proxy || return 1
    bai_setup_docker || return 1
}

# JupyterHub's proxy (npm's configurable-http-proxy) for the Hub tests and the sample
# Hub config, in .venv/node; installed once.
_bai_setup_hub_proxy() {
    local bin="$BAI_ROOT/.venv/node/node_modules/.bin/configurable-http-proxy"
    [ -x "$bin" ] && return 0
    if ! command -v npm >/dev/null 2>&1; then
        _bai_say "no npm: JupyterHub's proxy is not installed (the Hub tests need it)"
        [ "${CI:-}" != true ]
        return
    fi
    _bai_say "installing configurable-http-proxy (npm, into .venv/node)"
    mkdir -p "$BAI_ROOT/.venv/node"
    _bai_quiet "$BAI_ROOT/.venv/.bai-npm.log" npm install --prefix "$BAI_ROOT/.venv/node" \
        --no-audit --no-fund configurable-http-proxy@4
}

# Repo root = parent of the directory holding this file.
BAI_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)" || return 1
# shellcheck disable=SC2034  # used by the scripts that source this file
ROOT="$BAI_ROOT"
export BAI_ROOT

_bai_setup || return 1

export VIRTUAL_ENV="$BAI_ROOT/.venv"
case "$PATH" in
    "$BAI_ROOT/.venv/bin:"*) ;; # already first (sourced twice): don't stack it
    *) export PATH="$BAI_ROOT/.venv/bin:$PATH" ;;
esac
hash -r 2>/dev/null || true
