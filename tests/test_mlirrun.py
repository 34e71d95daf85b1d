"""mlirrun.py: pipelines, tools, diagnostics and the ExecutionEngine of the `mlir` capability."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pytest_hpccourse.grading import capabilities

pytestmark = pytest.mark.skipif(not capabilities.available("mlir"), reason="NEEDS mlir")

ADD = """
func.func @add(%a: memref<?xf32>, %b: memref<?xf32>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf32>
  scf.for %i = %c0 to %n step %c1 {
    %x = memref.load %a[%i] : memref<?xf32>
    %y = memref.load %b[%i] : memref<?xf32>
    %z = arith.addf %x, %y : f32
    memref.store %z, %b[%i] : memref<?xf32>
  }
  return
}
"""
TO_LLVM = ("builtin.module(convert-scf-to-cf, finalize-memref-to-llvm, convert-arith-to-llvm, convert-func-to-llvm,"
           " convert-cf-to-llvm, reconcile-unrealized-casts)")


def test_pipeline_lowers_and_the_engine_runs_it():
    from pytest_hpccourse.runtimes import mlirrun

    low = mlirrun.run_pipeline(ADD, TO_LLVM)
    assert "llvm.func @add" in low and "scf.for" not in low
    rng = np.random.default_rng(0)
    a = rng.standard_normal(37).astype(np.float32)
    b = rng.standard_normal(37).astype(np.float32)
    want = a + b
    mlirrun.execute(low, "add", a, b)
    np.testing.assert_array_equal(b, want)


def test_diagnostics_are_mlirs_own_messages():
    from pytest_hpccourse.runtimes import mlirrun

    with pytest.raises(mlirrun.MlirError, match="does not refer to a registered pass"):
        mlirrun.run_pipeline(ADD, "builtin.module(no-such-pass)")
    with pytest.raises(mlirrun.MlirError, match="use of undeclared SSA value"):
        mlirrun.verify("func.func @f() { %0 = arith.addi %1, %1 : i32\n return }")
    with pytest.raises(mlirrun.MlirError, match="doesn't match function result type"):
        mlirrun.verify("func.func @f() -> i32 { %0 = arith.constant 1 : i64\n return %0 : i64 }")


def test_tools_are_found_and_op_stats_come_back():
    from pytest_hpccourse.runtimes import mlirrun

    assert mlirrun.tool("mlir-opt").is_file() and mlirrun.tool("FileCheck").is_file()
    stats = mlirrun.opt(ADD, "--print-op-stats")
    counts = {m[0]: int(m[1]) for m in re.findall(r"^\s*([a-z_]+\.[a-z_.]+)\s*,\s*(\d+)\s*$", stats, re.M)}
    assert counts["memref.load"] == 2 and counts["arith.constant"] == 2 and counts["scf.for"] == 1
    with pytest.raises(mlirrun.MlirError):
        mlirrun.opt("func.func @f( {", "--verify-diagnostics")


def test_irdl_dialect_is_loaded_and_verifies():
    from pytest_hpccourse.runtimes import mlirrun

    irdl = """
    irdl.dialect @toy {
      irdl.operation @double {
        %f = irdl.is f32
        irdl.operands(x: %f)
        irdl.results(y: %f)
      }
    }
    """
    ok = 'func.func @f(%a: f32) -> f32 { %0 = "toy.double"(%a) : (f32) -> f32\n return %0 : f32 }'
    bad = 'func.func @f(%a: i32) -> i32 { %0 = "toy.double"(%a) : (i32) -> i32\n return %0 : i32 }'
    mlirrun.verify(ok, dialects=[irdl])
    with pytest.raises(mlirrun.MlirError):
        mlirrun.verify(bad, dialects=[irdl])


def test_execute_reports_what_is_not_lowered_and_missing_c_interfaces():
    from pytest_hpccourse.runtimes import mlirrun

    with pytest.raises(mlirrun.MlirError, match="cannot be converted to LLVM IR"):
        mlirrun.execute(ADD, "add", np.ones(3, np.float32), np.ones(3, np.float32))
    low = mlirrun.run_pipeline(ADD.replace(" attributes {llvm.emit_c_interface}", ""), TO_LLVM)
    with pytest.raises(mlirrun.MlirError, match="llvm.emit_c_interface"):
        mlirrun.execute(low, "add", np.ones(3, np.float32), np.ones(3, np.float32))
