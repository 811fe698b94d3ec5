"""The checked-in protobuf and gRPC code is exactly what rpc/proto/*.proto generates."""

from __future__ import annotations

from pathlib import Path

from rpc.proto.codegen import PROTO_DIR, generate


def test_generated_code_matches_the_proto_files(tmp_path: Path) -> None:
    generated = generate(tmp_path)
    assert generated, "no .proto files were compiled"
    stale = [p.name for p in generated if (PROTO_DIR / p.name).read_bytes() != p.read_bytes()]
    assert not stale, f"{stale} differ from the .proto; run `python -m rpc.proto.codegen` and commit the result"
    checked_in = sorted(p.name for p in PROTO_DIR.iterdir() if "_pb2" in p.name)
    assert checked_in == sorted(p.name for p in generated)
