"""CuTe runtimes: where the CuTe oracles live (`oracles`: pycute, the CuTe C++ headers, the CuTe DSL) and
CuTe C++ programs built and run from lesson tests (`cutecxx`)."""
