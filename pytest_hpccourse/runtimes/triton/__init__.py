"""Triton runtimes: the bounds/tf32 guard of the CPU interpreter (`guard`) and the `interpreter` marker's
child run (`interpreter`)."""
