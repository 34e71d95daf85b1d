// hpccourse CUDA emulator: everything cuda_runtime.h declares is in hpccourse_cuda.h (force-included).
#pragma once
#include "hpccourse_cuda.h"
