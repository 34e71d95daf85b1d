// hpccourse CUDA emulator: everything device_launch_parameters.h declares is in hpccourse_cuda.h (force-included).
#pragma once
#include "hpccourse_cuda.h"
