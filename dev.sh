#!/usr/bin/env bash
# specmon developer entry point. Every command sets up what it needs by itself.
#
#   ./dev.sh demo [ARGS]   run specmon's main job on the built-in demo fleet (no engine needed)
#   ./dev.sh test [ARGS]   the whole test suite, as CI runs it: lint, types, fast tier, real engines
#                          (with ARGS: one pytest run with those arguments instead)
#   ./dev.sh test-fast     lint, types and the fast tier only (no real engines, no downloads)
#   ./dev.sh provision     build/install the real engines and Debian tools the slow tier needs
#   ./dev.sh bench [NAME]  run a benchmark in bench/ (parser, scale, rules, promsource, cost, sidebyside, fleet, load, memory)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

find_python() {
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    echo "specmon needs Python 3.11 or newer; none found on PATH" >&2
    return 1
}

ensure_venv() {
    local stamp="$VENV/.specmon-installed"
    if [[ ! -x "$PY" ]]; then
        "$(find_python)" -m venv "$VENV"
    fi
    # Reinstall only when the project metadata changed since the last install.
    if [[ ! -f "$stamp" || pyproject.toml -nt "$stamp" ]]; then
        "$PY" -m pip install --quiet --disable-pip-version-check --upgrade pip
        "$PY" -m pip install --quiet --disable-pip-version-check -e ".[test,dashboards,tap]"
        touch "$stamp"
    fi
}

lint() {
    echo "==> ruff"
    "$VENV/bin/ruff" check specmon tests bench deploy grafana tools
    "$VENV/bin/ruff" format --check specmon tests bench deploy grafana tools
    echo "==> mypy --strict"
    "$VENV/bin/mypy"  # specmon, tests, bench, grafana, deploy (pyproject.toml)
}

# pytest rewrites every test module's asserts at collection; with bytecode writing off (some
# environments set PYTHONDONTWRITEBYTECODE) it does so on every run: 10 s of 13 to collect.
unset PYTHONDONTWRITEBYTECODE

cmd="${1:-help}"
shift || true
case "$cmd" in
    demo)
        ensure_venv
        exec "$VENV/bin/specmon" demo "$@"
        ;;
    test)
        ensure_venv
        lint
        echo "==> provisioning real engines and tools (cached after the first run)"
        "$PY" -m tests.realengines.provision all
        if [[ $# -gt 0 ]]; then  # a selection: one plain pytest run
            exec "$PY" -m pytest "$@"
        fi
        echo "==> pytest: real engines, services and the fast tier side by side (tools/run_tests.py)"
        exec "$PY" tools/run_tests.py
        ;;
    test-fast)
        ensure_venv
        lint
        if [[ $# -gt 0 ]]; then  # a selection within the fast tier: one plain pytest run
            exec "$PY" -m pytest -m "not realengine and not prometheus and not browser and not deploytools" "$@"
        fi
        exec "$PY" tools/run_tests.py --fast
        ;;
    provision)
        ensure_venv
        exec "$PY" -m tests.realengines.provision "${@:-all}"
        ;;
    bench)
        ensure_venv
        exec "$PY" -m bench "$@"
        ;;
    *)
        sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
        [[ "$cmd" == help || "$cmd" == -h || "$cmd" == --help ]] && exit 0
        exit 2
        ;;
esac
