"""Generate the protobuf and gRPC modules from ``rpc/proto/*.proto`` (checked in; see tests/test_protos.py).

    python -m rpc.codegen            # rewrite rpc/proto/*_pb2*.py and their .pyi stubs

Needs the ``test`` extra (grpcio-tools, mypy-protobuf). The test suite regenerates into a temporary directory
and fails when the checked-in files differ, so an edited .proto cannot drift from its code.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "rpc" / "proto"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def _plugin(name: str) -> str:
    candidate = Path(sys.executable).parent / name
    found = candidate if candidate.exists() else shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} not found: install the test extra (mypy-protobuf)")
    return str(found)


def generate(out_dir: Path) -> list[Path]:
    """Run protoc on every .proto into ``out_dir`` (laid out as the repository); return the files written."""
    protos = sorted(p.relative_to(ROOT) for p in PROTO_DIR.glob("*.proto"))
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{ROOT}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *map(str, protos),
    ]
    subprocess.run(command, check=True, cwd=ROOT)
    return sorted(p for p in (out_dir / "rpc" / "proto").iterdir() if p.name.endswith(GENERATED_SUFFIXES))


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        for path in generate(Path(scratch)):
            shutil.copyfile(path, PROTO_DIR / path.name)
            print(f"wrote {PROTO_DIR / path.name}")  # noqa: T201


if __name__ == "__main__":
    main()
