// The bottom of the stack: an LLVM-dialect kernel with NVVM intrinsics (what gpu.module(convert-gpu-to-nvvm)
// produces). Op names may hold several dots: nvvm.read.ptx.sreg.tid.x is in the nvvm dialect.
gpu.module @kernels {
  llvm.func @saxpy(%a: f32, %x: !llvm.ptr<1>, %y: !llvm.ptr<1>, %n: i32) attributes {nvvm.kernel} {
    %tid = nvvm.read.ptx.sreg.tid.x : i32
    %ctaid = nvvm.read.ptx.sreg.ctaid.x : i32
    %ntid = nvvm.read.ptx.sreg.ntid.x : i32
    %base = llvm.mul %ctaid, %ntid : i32
    %i = llvm.add %base, %tid : i32
    %in = llvm.icmp "slt" %i, %n : i32
    llvm.cond_br %in, ^body, ^done
  ^body:
    %px = llvm.getelementptr %x[%i] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
    %py = llvm.getelementptr %y[%i] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
    %vx = llvm.load %px : !llvm.ptr<1> -> f32
    %vy = llvm.load %py : !llvm.ptr<1> -> f32
    %r = llvm.intr.fma(%a, %vx, %vy) : (f32, f32, f32) -> f32
    llvm.store %r, %py : f32, !llvm.ptr<1>
    llvm.br ^done
  ^done:
    llvm.return
  }
}
