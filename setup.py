"""Build hook: one import name, ``sdr``, for the three source folders, and the native
placement step.

The folders stay where the brief put them (``sdr/``, ``backends/``, ``simulator/``), but
only ``sdr`` goes into site-packages: ``backends/`` installs as ``sdr.backends`` and
``simulator/`` as ``sdr.simulator``. Everything else (name, dependencies, entry points)
is in pyproject.toml.

``sdr._placement`` (sdr/_placement.c) is the C implementation of
:func:`sdr.placement.place_batch`. It is optional: without a compiler the install still
succeeds and the Python reference does the work (with a warning at import). Extra
compiler flags come from ``CFLAGS``, as usual; ``make asan`` builds a sanitizer copy.
"""

from setuptools import Extension, find_packages, setup

FOLDERS = {"sdr": "sdr", "sdr.backends": "backends", "sdr.simulator": "simulator"}

packages = [
    f"{name}.{sub}" if sub else name
    for name, folder in FOLDERS.items()
    for sub in ["", *find_packages(folder)]
]


def native(name: str, source: str) -> Extension:
    """One optional C extension: without a compiler the install still succeeds and the
    Python reference runs instead (each module's loader warns once at import). Every
    module may include the shared CRC-32 (sdr/_crc32.h)."""
    return Extension(
        name,
        sources=[source],
        depends=["sdr/_crc32.h"],
        extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
        optional=True,
    )


NATIVE = [
    native("sdr._placement", "sdr/_placement.c"),
    native("sdr.backends.wan._forward", "backends/wan/_forward.c"),
    native("sdr.backends.udp._datapath", "backends/udp/_datapath.c"),
]

setup(packages=packages, package_dir=FOLDERS, ext_modules=NATIVE)
