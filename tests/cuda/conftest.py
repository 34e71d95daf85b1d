from pathlib import Path

import pytest

KERNELS = Path(__file__).parent / "kernels"


@pytest.fixture(scope="session")
def kernels_dir() -> Path:
    return KERNELS
