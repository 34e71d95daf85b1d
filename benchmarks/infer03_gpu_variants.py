"""infer-03 on a GPU: how far each round-2 variant's compiled kernel is from the float64 reference.

Issue 26 part 3 found the two element-wise `[[correct]]` variants (docs/validity/round2/variants/infer-03.toml)
at 4/4 on the CPU (Triton interpreter) but 0.75/4 compiled on the H200. This script applies each variant to a
copy of the lesson, runs the test file's own cases on CUDA and prints the largest error per case, per query head.

    python3 benchmarks/infer03_gpu_variants.py            # GPU machine, repository root
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path

os.environ.setdefault("TRITON_F32_DEFAULT", "ieee")  # as the tests' autouse fixture sets it

import torch  # noqa: E402

LESSON = Path("modules/07-inference/03-paged-attention")
VARIANTS = Path(os.environ.get("INFER03_VARIANTS", "docs/validity/round2/variants/infer-03.toml"))


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def variant_copy(tmp: Path, name: str, edits: list[dict]) -> Path:
    dst = tmp / name
    shutil.copytree(LESSON, dst)
    for e in edits:
        f = dst / e["file"]
        text = f.read_text()
        assert text.count(e["find"]) == e.get("count", 1), (name, e["find"][:60])
        f.write_text(text.replace(e["find"], e["replace"]))
    return dst


CASES = {  # name: (lens, hq, hkv, d, bs, seed, tile_n, extra)
    "gqa2-bs16": ([17, 40, 1, 16, 5], 4, 2, 32, 16, 16 * 7 + 4, 16, {}),
    "mha-bs16": ([33, 2], 3, 3, 64, 16, 16 * 7 + 3, 32, {}),
    "mqa-bs4": ([13, 3, 130], 8, 1, 16, 4, 4 * 7 + 8, 64, {}),
    "large-logits": ([37, 21], 4, 2, 16, 8, 3, 16, {"q_scale": 4.0, "first_block_k_scale": 40.0}),
}


def main() -> int:
    tests = load("infer03_tests", LESSON / "test_paged_attention.py")
    doc = tomllib.loads(VARIANTS.read_text())
    variants = [("reference", [])] + [(v["name"], v.get("edits") or [v]) for v in doc.get("correct", [])]
    with tempfile.TemporaryDirectory() as tmp_name:
        for name, edits in variants:
            mod = load(f"pa_{name.replace('-', '_')}", variant_copy(Path(tmp_name), name, edits) / "paged_attention.py")
            for case, (lens, hq, hkv, d, bs, seed, tile_n, extra) in CASES.items():
                q, kc, vc, table, ctx, q64, dense = tests._case(lens, hq, hkv, d, bs, seed, device="cuda", **extra)
                out = torch.full_like(q, float("nan"))
                mod.paged_decode_attention(q, kc, vc, table, ctx, out=out, tile_n=tile_n)
                ref = tests._reference(q64, dense, hq, hkv, 1.0 / math.sqrt(d))
                err = (out.double().cpu() - ref).abs()
                per_head = err.amax(dim=(0, 2)).tolist()
                print(f"{name:24s} {case:13s} max|err| {err.max().item():.3e} nan {torch.isnan(out).sum().item():4d}  "
                      f"per query head {' '.join(f'{x:.1e}' for x in per_head)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
