"""pytest-hpccourse: the pytest plugin and tools that grade the HPC / AI-infrastructure course."""

__version__ = "0.1.0"
