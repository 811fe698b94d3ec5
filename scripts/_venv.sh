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
        # A .venv made when the test extra held the code generators has them in site-packages still.
        if "$root/.venv/bin/python" -m pip show grpcio-tools mypy-protobuf >/dev/null 2>&1; then
            "$root/.venv/bin/python" -m pip uninstall --quiet --yes grpcio-tools mypy-protobuf >&2 || return 1
        fi
        rm -f "$root"/.venv/.multiraft-installed-* && touch "$stamp"
    fi
    if [[ ",$extras," == *,test,* ]]; then
        ensure_codegen_tools "$root" || return 1
    fi
}

# The code generators of rpc/proto/codegen.py, pinned so that everyone runs the same protoc: tests/test_protos.py
# compares its output byte for byte. They live in .venv/codegen, off the interpreter's path, because grpcio's
# own grpc/__init__.py imports grpc_tools whenever it is importable (a backwards-compatibility shim), which
# would load it into every client; rpc/proto/codegen.py puts the directory on PYTHONPATH for protoc alone. Their
# dependencies (grpcio, protobuf, types-protobuf) come from .venv. A stamp inside the directory records the
# pins it holds, so changing them re-installs it.
ensure_codegen_tools() {
    local root="$1"
    local requirements=(grpcio-tools==1.85.1 mypy-protobuf==5.1.0)
    local target="$root/.venv/codegen"
    local stamp
    stamp=".installed-$(echo "${requirements[*]}" | sha256sum | cut -c1-16)"
    if [ -f "$target/$stamp" ]; then
        return 0
    fi
    echo "installing ${requirements[*]} into .venv/codegen" >&2
    rm -rf "$target.partial"
    "$root/.venv/bin/python" -m pip install --quiet --target "$target.partial" --no-deps "${requirements[@]}" >&2 ||
        return 1
    touch "$target.partial/$stamp"
    rm -rf "$target" && mv "$target.partial" "$target"
}
