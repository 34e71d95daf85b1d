"""CPU side (needs the `mlir` capability): lower mlir-08's test cases to PTX with the reference gpu_lower.py.

Writes benchmarks/mlir08_gpu/out/k<i>.ptx and cases.json (shape, block, kernel name, parameter count, launch
grid and block); run_ptx.py loads and runs them on a GPU machine. Run from the repository root.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

LESSON = Path("modules/05-mlir/08-gpu-lowering")
OUT = Path("benchmarks/mlir08_gpu/out")


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    sys.path.insert(0, str(LESSON))
    tests = load("mlir08_tests", LESSON / "test_gpu_lower.py")
    gl = load("mlir08_gpu_lower", LESSON / "gpu_lower.py")
    emu = load("mlir08_gpu_emu", LESSON / "gpu_emu.py")
    OUT.mkdir(parents=True, exist_ok=True)
    block = tuple(gl.block_shape())
    cases = []
    for shape, blk in tests.CASES + [((37, 53, 29), block), ((300, 257, 70), block)]:
        ptx = tests.ptx_text(gl, shape, blk)
        name = re.search(r"^\.visible \.entry (\w+)\(", ptx, re.M).group(1)
        n_params = len(re.findall(r"\.param \.\w+ (?:\.ptr [^,\n]*?)?\w+_param_\d+", ptx))
        launch = emu.find_launch(tests.lowered(gl, shape, blk)["outline"])
        file = f"k{len(cases)}.ptx"
        (OUT / file).write_text(ptx)
        cases.append({"shape": shape, "block": blk, "name": name, "n_params": n_params, "grid": list(launch.grid),
                      "launch_block": list(launch.block), "ptx": file})
    (OUT / "cases.json").write_text(json.dumps(cases))
    print(len(cases), "kernels in", OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
