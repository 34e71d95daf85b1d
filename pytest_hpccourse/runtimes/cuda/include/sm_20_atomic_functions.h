// hpccourse CUDA emulator: everything sm_20_atomic_functions.h declares is in hpccourse_cuda.h (force-included).
#pragma once
#include "hpccourse_cuda.h"
