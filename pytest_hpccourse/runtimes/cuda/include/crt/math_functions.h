// hpccourse CUDA emulator: everything crt/math_functions.h declares is in hpccourse_cuda.h (force-included).
#pragma once
#include "../hpccourse_cuda.h"
