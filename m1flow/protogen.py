"""Generate the Python code for proto/ when it is missing or older than the .proto files.

Why at import time too: `python -m svc_x` straight after a clone must work, and a stale generated
module that disagrees with proto/ is a silent bug. `make proto` calls the same function.
"""
from __future__ import annotations

import fcntl
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_PACKAGE = ROOT / "m1flow" / "v1"


def _sources() -> list[Path]:
    return sorted((PROTO_DIR / "m1flow" / "v1").glob("*.proto"))


def is_stale() -> bool:
    """True when a generated module is missing or older than its .proto."""
    for src in _sources():
        out = OUT_PACKAGE / f"{src.stem}_pb2.py"
        if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
            return True
    return False


def generate(force: bool = False) -> None:
    """Run grpc_tools.protoc over proto/ into m1flow/v1 (under a file lock: several processes start at once)."""
    OUT_PACKAGE.mkdir(parents=True, exist_ok=True)
    with open(OUT_PACKAGE.parent / ".protogen.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and not is_stale():
            return
        from grpc_tools import protoc  # imported lazily: only needed when generating
        import grpc_tools

        include = str(Path(grpc_tools.__file__).parent / "_proto")
        args = ["protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={ROOT}",
                f"--grpc_python_out={ROOT}", f"--pyi_out={ROOT}", *map(str, _sources())]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {PROTO_DIR}")
        (OUT_PACKAGE / "__init__.py").write_text('"""Generated from proto/ by m1flow.protogen; do not edit."""\n')


if __name__ == "__main__":
    generate(force=True)
    print(f"generated {OUT_PACKAGE}")
