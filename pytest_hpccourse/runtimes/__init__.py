"""Runtimes: what lesson code and lesson tests import (CUDA, Triton, Ray, MLIR, CuTe).

Imports nothing from `grading`, `authoring` or `site` (docs/architecture.md).
"""
