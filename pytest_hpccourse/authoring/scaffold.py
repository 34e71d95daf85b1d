"""`hpccourse new`: scaffold a lesson folder that already validates and grades.

    hpccourse new modules/02-cuda 04-warp-shuffle [--id cuda-04] [--lang py|cu] [--title T]

Writes lesson.toml (one mutant, three questions of different kinds), README.md with the sections
DESIGN.md asks for, a code file with a solution region, a test and the reference answers.yaml.
The example (a scaled copy, `out = alpha * x`) is sound as it stands, so `hpccourse check` passes on
everything except the `TODO(scaffold)` placeholders, which it reports until the author replaces
them with the real lesson.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_hpccourse.grading import manifest

from .check import PLACEHOLDER

_NN = re.compile(r"^(\d{2})-")
_ID = re.compile(r"^(?P<prefix>.+)-(?P<num>\d{2})$")

README = """\
# {title}

> {placeholder}: 一句话说明本课要解决的问题。

## 概念
{placeholder}: 核心概念与推导（公式、图示、复杂度）。

## 为什么重要（生产环境）
{placeholder}: 这个技术在真实系统（vLLM / SGLang / PyTorch / CUTLASS / 训练框架）中的位置与收益。

## 任务
在 `{code}` 中补全标有 `TODO({id})` 的部分。{placeholder}: 说明输入、输出、形状与精度要求。

运行：`pytest {folder} --course-report`

## 提示
- {placeholder}: 循序渐进的提示，不直接给出答案。

## 延伸阅读
- {placeholder}: 论文、官方文档、固定版本的源码文件路径。
"""

PY_CODE = '''\
"""{title_en}: {placeholder} describe what the learner implements."""

import numpy as np


def scale(alpha: float, x: np.ndarray, out: np.ndarray) -> None:
    """Write alpha * x into `out` (same length as x)."""
    ### HINT: one vectorised expression over the whole array
    ### BEGIN SOLUTION
    out[:] = alpha * x
    ### END SOLUTION
'''

PY_TEST = '''\
import numpy as np
import pytest


# {placeholder}: test the real task: fixed seed, odd sizes, edge cases, poisoned outputs,
# an independent float64 reference and a justified tolerance.
@pytest.mark.parametrize("n", [1, 7, 1000, 1031])
def test_matches_float64_reference(lesson, n):
    mod = lesson.load("{code}")
    rng = np.random.default_rng(1000 + n)
    x = rng.standard_normal(n)
    alpha = float(rng.uniform(0.5, 2.0))
    out = np.full(n, np.nan)  # poisoned: an unwritten element stays NaN
    mod.scale(alpha, x, out)
    # one float64 multiply per element on both sides: equal to within one rounding
    np.testing.assert_allclose(out, alpha * x, rtol=1e-15, atol=0)
'''

CU_CODE = '''\
// {title_en}: {placeholder} describe what the learner implements.
extern "C" __global__ void scale(const float* x, float* out, float alpha, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    // HINT: n need not be a multiple of the block size
    // BEGIN SOLUTION
    if (i < n) {{
        out[i] = alpha * x[i];
    }}
    // END SOLUTION
}}
'''

CU_TEST = '''\
import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda


# {placeholder}: test the real task: fixed seed, odd sizes, edge cases, poisoned outputs,
# an independent float64 reference and a justified tolerance.
@pytest.mark.parametrize("n", [1, 7, 1000, 1031])
def test_matches_float64_reference(lesson, n):
    mod = cuda.load(lesson.path("{code}"))
    rng = np.random.default_rng(1000 + n)
    x = rng.standard_normal(n).astype(np.float32)
    alpha = np.float32(rng.uniform(0.5, 2.0))
    out = np.full(n, np.nan, dtype=np.float32)  # poisoned: an unwritten element stays NaN
    block = 128
    mod.scale[(n + block - 1) // block, block, 0](x, out, alpha, np.int32(n))
    # one fp32 multiply per element: within half an ulp of the float64 product
    np.testing.assert_allclose(out, alpha.astype(np.float64) * x.astype(np.float64), rtol=1e-6, atol=0)
'''

LESSON_TOML = '''\
id = "{id}"
title = "{placeholder} 标题"
title_en = "{title_en}"
requires = [{requires}]
files = ["{code}"]
tests = ["{test}"]

[[mutants]]
file = "{code}"
find = {mutant_find}
replace = {mutant_replace}
count = 1
why = "{placeholder}: drops the last element"

[[questions]]
id = "Q1"
kind = "numeric"
prompt = "{placeholder}: 一个有唯一数值答案的问题（例：n = 1000 个 fp32 元素读写共多少字节？）"
answer = 8000
rel_tol = 0.01
unit = "B"
explanation = "{placeholder}: 完整的参考答案（推导、数字、易错点）。"

[[questions]]
id = "Q2"
kind = "choice"
prompt = "{placeholder}: 一个选择题"
options = ["A. {placeholder} 选项一", "B. {placeholder} 选项二", "C. {placeholder} 选项三"]
answer = "B"
explanation = "{placeholder}: 为什么选 B，其他选项错在哪里。"

[[questions]]
id = "Q3"
kind = "formula"
prompt = "{placeholder}: 一个答案是公式的问题（例：n 个元素、每个 b 字节，读写共多少字节？）"
variables = ["n", "b"]
answer = "2*n*b"
explanation = "{placeholder}: 公式的推导。"
'''

ANSWERS = 'Q1: 8000\nQ2: B\nQ3: "2*n*b"\n'

LANGS = {
    "py": {"code": "kernel.py", "test": "test_kernel.py", "source": PY_CODE, "tests": PY_TEST,
           "requires": '"numpy"', "find": "out[:] = alpha * x",
           "replace": "out[: x.shape[0] - 1] = alpha * x[:-1]"},
    "cu": {"code": "kernel.cu", "test": "test_kernel.py", "source": CU_CODE, "tests": CU_TEST,
           "requires": '"cuda"', "find": "if (i < n) {", "replace": "if (i < n - 1) {"},
}


class ScaffoldError(Exception):
    pass


def _sibling_ids(module: Path) -> list[tuple[str, int]]:
    out = []
    for d in manifest.iter_lesson_dirs([module]):
        lid = manifest.read_id(d)
        if lid and (m := _ID.match(lid)):
            out.append((m["prefix"], int(m["num"])))
    return out


def lesson_id(module: Path, slug: str) -> str:
    """Siblings' prefix and their highest number + 1; else the module name's first word and the
    slug's NN (`modules/02-cuda` + `04-warp` -> `cuda-04`)."""
    siblings = _sibling_ids(module)
    if siblings:
        prefixes = [p for p, _ in siblings]
        prefix = max(set(prefixes), key=prefixes.count)
        return f"{prefix}-{max(n for p, n in siblings if p == prefix) + 1:02d}"
    prefix = _NN.sub("", module.name).split("-")[0].lower() or "lesson"
    m = _NN.match(slug)
    return f"{prefix}-{m.group(1) if m else '01'}"


def folder_name(module: Path, slug: str) -> str:
    if _NN.match(slug):
        return slug
    children = module.iterdir() if module.is_dir() else iter(())
    used = [int(m.group(1)) for d in children if d.is_dir() and (m := _NN.match(d.name))]
    return f"{max(used, default=0) + 1:02d}-{slug}"


MODULE_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "hpccourse-{name}"
version = "0.1.0"
description = "{placeholder}: what this module teaches"
requires-python = ">=3.11"
# Only what this module's lessons need (DESIGN.md, "Runtimes").
dependencies = ["pytest-hpccourse", "numpy>=1.26"]

[tool.setuptools]
packages = []
"""

MODULE_README = """\
# {name}

{placeholder}: 本模块教什么、课程列表、如何运行（`pytest --course-report`）。
"""


def _module_files(module: Path) -> list[str]:
    """A module is a repo of its own: give a new one its pyproject.toml and README.md."""
    created = []
    for name, template in (("pyproject.toml", MODULE_PYPROJECT), ("README.md", MODULE_README)):
        if not (module / name).exists():
            (module / name).write_text(template.format(name=module.name, placeholder=PLACEHOLDER),
                                       encoding="utf-8")
            created.append(name)
    return created


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def scaffold(module: Path, slug: str, *, lid: str | None = None, lang: str = "py",
             title_en: str | None = None) -> Path:
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", slug):
        raise ScaffoldError(f"{slug!r}: use lower-case letters, digits and '-', e.g. 04-warp-shuffle")
    folder = module / folder_name(module, slug)
    if folder.exists():
        raise ScaffoldError(f"{folder}: already exists")
    lid = lid or lesson_id(module, folder.name)
    if not manifest.LESSON_ID.match(lid):
        raise ScaffoldError(f"{lid!r}: a lesson id looks like <module prefix>-<NN>, e.g. cuda-04")
    taken = {manifest.read_id(d) for d in manifest.iter_lesson_dirs([module])}
    if lid in taken:
        raise ScaffoldError(f"{lid!r}: already used in {module}")
    spec = LANGS[lang]
    words = _NN.sub("", folder.name).replace("-", " ")
    fields = {
        "id": lid, "placeholder": PLACEHOLDER, "code": spec["code"], "test": spec["test"],
        "title": f"{PLACEHOLDER} {words}", "title_en": title_en or words.capitalize(),
        "requires": spec["requires"], "folder": folder.as_posix(),
        "mutant_find": _toml_str(spec["find"]), "mutant_replace": _toml_str(spec["replace"]),
    }
    folder.mkdir(parents=True)
    _module_files(module)
    files = {
        "lesson.toml": LESSON_TOML, "README.md": README, spec["code"]: spec["source"],
        spec["test"]: spec["tests"], "answers.yaml": ANSWERS,
    }
    for name, template in files.items():
        (folder / name).write_text(template.format(**fields), encoding="utf-8")
    manifest.load_lesson(folder)  # the scaffold must validate; a failure here is a bug
    return folder


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hpccourse new", description="Scaffold a new lesson folder.")
    p.add_argument("module", type=Path, help="the module folder, e.g. modules/02-cuda")
    p.add_argument("slug", help="lesson folder name, e.g. 04-warp-shuffle (NN- added if missing)")
    p.add_argument("--id", dest="lid", help="lesson id (default: from the siblings or the module)")
    p.add_argument("--lang", choices=sorted(LANGS), default="py",
                   help="language of the code task: py (Python) or cu (CUDA C); default py")
    p.add_argument("--title-en", help="English title (default: from the slug)")
    return p


def main(args: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(args)
    missing = [n for n in ("pyproject.toml", "README.md") if not (ns.module / n).exists()]
    try:
        folder = scaffold(ns.module, ns.slug, lid=ns.lid, lang=ns.lang, title_en=ns.title_en)
    except (ScaffoldError, manifest.ManifestError) as e:
        print(f"hpccourse new: error: {e}", file=sys.stderr)
        return 2
    lid = manifest.read_id(folder)
    names = " ".join(sorted(p.name for p in folder.iterdir()))
    print(f"created {folder} ({lid}): {names}")
    if missing:
        print(f"created {ns.module}/{{{','.join(missing)}}} (a module is a repo of its own)")
    print(f"next: write the lesson, replace every {PLACEHOLDER}, then `hpccourse check {folder}`")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
