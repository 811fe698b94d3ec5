# Sourced by scripts/test and scripts/quickstart: make .venv exist and hold the project with the given extras.
# Re-installs only when pyproject.toml or the extras change (a stamp file records what was installed).
ensure_venv() {
    local extras="$1"
    local root
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    local python="${PYTHON:-python3}"
    if ! command -v "$python" >/dev/null 2>&1; then
        echo "error: $python not found; multiraft needs Python >= 3.11" >&2
        return 1
    fi
    if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
        echo "error: multiraft needs Python >= 3.11, $python is $("$python" --version 2>&1)" >&2
        return 1
    fi
    if [ ! -x "$root/.venv/bin/python" ]; then
        echo "creating $root/.venv" >&2
        "$python" -m venv "$root/.venv" || return 1
    fi
    local stamp
    stamp="$root/.venv/.multiraft-installed-$(cat "$root/pyproject.toml" | sha256sum | cut -c1-16)-${extras//,/_}"
    if [ ! -f "$stamp" ]; then
        echo "installing multiraft[$extras] into .venv (first run takes a minute or two)" >&2
        "$root/.venv/bin/python" -m pip install --quiet --upgrade pip >&2 || return 1
        "$root/.venv/bin/python" -m pip install --quiet -e "$root[$extras]" >&2 || return 1
        rm -f "$root"/.venv/.multiraft-installed-* && touch "$stamp"
    fi
}
