"""mlir-08: lower an scf.parallel loop nest to a GPU kernel and PTX, on a machine without a GPU.

You write (the BEGIN SOLUTION regions):
  block_shape()             your thread-block shape (rows, cols) of C
  launch_shape(m, n, block) the grid and block dimensions the lowering must produce, (x, y, z) each
  stages(block_rows, block_cols)  the pass pipeline as five named stages: map, launch, outline, nvvm, ptx
The rest (the payload, running the stages, reading the PTX) is given.

    python gpu_lower.py      # prints the IR after each stage and the PTX for a 37x53x29 problem
"""

from __future__ import annotations

from pytest_hpccourse.runtimes import mlirrun

STAGES = ("map", "launch", "outline", "nvvm", "ptx")


def block_shape() -> tuple[int, int]:
    """Your thread-block shape: (rows, cols) of C computed by one block, one element per thread."""
    ### HINT: 32 consecutive threadIdx.x form a warp and should touch 32 consecutive floats; at most 1024 threads
    ### BEGIN SOLUTION
    return (8, 32)  # 256 threads; a warp = one row of 32 consecutive columns = one 128-byte line of C
    ### END SOLUTION


def payload(m: int, n: int, k: int) -> str:
    """C[i, j] = relu(sum_k A[i, k] * B[k, j] + bias[j]) as one scf.parallel over (i, j) with a sequential k loop:
    every (i, j) is independent, which is what lets the loop become a grid of GPU threads."""
    ta, tb, tc = f"memref<{m}x{k}xf32>", f"memref<{k}x{n}xf32>", f"memref<{m}x{n}xf32>"
    return f"""module {{
  func.func @mlp(%A: {ta}, %B: {tb}, %bias: memref<{n}xf32>, %C: {tc}) {{
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %M = arith.constant {m} : index
    %N = arith.constant {n} : index
    %K = arith.constant {k} : index
    %zero = arith.constant 0.0 : f32
    scf.parallel (%i, %j) = (%c0, %c0) to (%M, %N) step (%c1, %c1) {{
      %acc = scf.for %kk = %c0 to %K step %c1 iter_args(%s = %zero) -> (f32) {{
        %a = memref.load %A[%i, %kk] : {ta}
        %b = memref.load %B[%kk, %j] : {tb}
        %p = arith.mulf %a, %b : f32
        %t = arith.addf %s, %p : f32
        scf.yield %t : f32
      }}
      %bj = memref.load %bias[%j] : memref<{n}xf32>
      %y = arith.addf %acc, %bj : f32
      %r = arith.maximumf %y, %zero : f32
      memref.store %r, %C[%i, %j] : {tc}
      scf.reduce
    }}
    return
  }}
}}
"""


def launch_shape(m: int, n: int, block: tuple[int, int]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, threads), each as (x, y, z): what `gpu.launch_func ... blocks in (...) threads in (...)` must say for an
    m x n output and a block of `block` = (rows, cols) of C."""
    ### HINT: x is the fastest-varying hardware dimension; a partial block at the edge still needs its own block
    ### BEGIN SOLUTION
    rows, cols = block
    grid = (-(-n // cols), -(-m // rows), 1)  # ceil-div: the last block column / row may be partial
    return grid, (cols, rows, 1)  # threadIdx.x walks the columns of C
    ### END SOLUTION


def stages(block_rows: int, block_cols: int) -> list[tuple[str, str]]:
    """The lowering as five (name, passes) stages, in this order. `passes` is a pass list as inside
    `builtin.module(...)`; function passes go in `func.func(...)`, passes on the kernel module in `gpu.module(...)`.

      map      the (i, j) loop tiled into blocks of (block_rows, block_cols); every scf.parallel carries a `mapping`:
               the outer loop on blocks, the inner one on threads, the column index j on the x dimension
      launch   no scf.parallel left: one gpu.launch in @mlp
      outline  the launch body is a kernel gpu.func in a gpu.module, @mlp calls it with gpu.launch_func; only the
               four memrefs cross the host/device boundary
      nvvm     the gpu.module holds the LLVM/NVVM dialects and an NVVM target for sm_90 (PTX ISA 8.0)
      ptx      a gpu.binary holding the PTX text"""
    ### HINT: a conversion pass skips what it cannot handle instead of failing: check each stage's IR for what it should hold
    ### BEGIN SOLUTION
    return [
        # fixed inner bounds (= the block shape) and an in-bounds guard; innermost-first: j, the last dim, goes to x
        ("map", f"func.func(scf-parallel-loop-tiling{{parallel-loop-tile-sizes={block_rows},{block_cols}"
                " no-min-max-bounds}, gpu-map-parallel-loops{mapping-policy=innermost-first})"),
        ("launch", "func.func(convert-parallel-loops-to-gpu), canonicalize"),
        ("outline", "gpu-launch-sink-index-computations, gpu-kernel-outlining, canonicalize"),  # constants go inside
        ("nvvm", "lower-affine, convert-scf-to-cf, nvvm-attach-target{chip=sm_90 features=+ptx80},"
                 " gpu.module(convert-gpu-to-nvvm), reconcile-unrealized-casts"),
        ("ptx", "gpu-module-to-binary{format=isa}"),
    ]
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------- given: the driver


def lower(ir_text: str, block: tuple[int, int], order: list[str] | None = None) -> dict[str, str]:
    """Run the stages (in `order`, default STAGES); {stage name: IR after it}. MlirError on failure."""
    table = dict(stages(*block))
    out, ir = {}, ir_text
    for name in order or STAGES:
        ir = mlirrun.run_pipeline(ir, f"builtin.module({table[name]})")
        out[name] = ir
    return out


def ptx_of(ir_text: str) -> dict[str, str]:
    """{gpu.binary name: PTX text} of every gpu.binary in the module (format=isa keeps the PTX as text)."""
    from mlir import ir
    from mlir.dialects import gpu

    found = {}
    with ir.Context() as ctx:
        module = mlirrun.parse(ir_text, ctx)
        for op in module.body.operations:
            if op.operation.name == "gpu.binary":
                name = ir.StringAttr(op.operation.attributes["sym_name"]).value
                obj = gpu.ObjectAttr(op.operation.attributes["objects"][0])
                found[name] = obj.object.decode()
    return found


if __name__ == "__main__":
    irs = lower(payload(37, 53, 29), block_shape())
    for stage, text in irs.items():
        if stage != "ptx":
            print(f"// ----- after {stage} -----\n{text}")
    for name, ptx in ptx_of(irs["ptx"]).items():
        print(f"// ----- PTX of {name} -----\n{ptx}")
    print("launch_shape:", launch_shape(37, 53, block_shape()))
