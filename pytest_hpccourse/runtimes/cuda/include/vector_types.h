// hpccourse CUDA emulator: everything vector_types.h declares is in hpccourse_cuda.h (force-included).
#pragma once
#include "hpccourse_cuda.h"
