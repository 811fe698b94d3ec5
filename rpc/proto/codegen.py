"""Generate the protobuf and gRPC modules from ``rpc/proto/*.proto`` (checked in; see tests/test_protos.py).

    python -m rpc.proto.codegen            # rewrite rpc/proto/*_pb2*.py and their .pyi stubs

Needs grpcio-tools and mypy-protobuf, which ``scripts/test`` installs, pinned, into ``.venv/codegen`` rather
than site-packages: grpcio's own ``grpc/__init__.py`` imports ``grpc_tools`` whenever it is importable (a
backwards-compatibility shim), so beside grpcio it would load into every client. protoc runs in a subprocess
with that directory on ``PYTHONPATH``, which the mypy plugins it starts inherit. The test suite regenerates
into a temporary directory and fails when the checked-in files differ, so an edited .proto cannot drift from
its code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "rpc" / "proto"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
CODEGEN_DIR = ROOT / ".venv" / "codegen"  # made by scripts/_venv.sh (ensure_codegen_tools)


def _codegen_tool(relative: str) -> Path:
    path = CODEGEN_DIR / relative
    if not path.exists():
        raise RuntimeError(f"{path} not found: run scripts/test once, which installs the code generators there")
    return path


def generate(out_dir: Path) -> list[Path]:
    """Run protoc on every .proto into ``out_dir`` (laid out as the repository); return the files written."""
    protos = sorted(p.relative_to(ROOT) for p in PROTO_DIR.glob("*.proto"))
    _codegen_tool("grpc_tools")  # say how to get it, rather than "No module named grpc_tools"
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{ROOT}",
        f"--plugin=protoc-gen-mypy={_codegen_tool('bin/protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_codegen_tool('bin/protoc-gen-mypy_grpc')}",
        f"--python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *map(str, protos),
    ]
    python_path = os.pathsep.join(filter(None, [str(CODEGEN_DIR), os.environ.get("PYTHONPATH")]))
    subprocess.run(command, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": python_path})
    return sorted(p for p in (out_dir / "rpc" / "proto").iterdir() if p.name.endswith(GENERATED_SUFFIXES))


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        for path in generate(Path(scratch)):
            shutil.copyfile(path, PROTO_DIR / path.name)
            print(f"wrote {PROTO_DIR / path.name}")  # noqa: T201


if __name__ == "__main__":
    main()
