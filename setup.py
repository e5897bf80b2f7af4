"""Build hook: one import name, ``sdr``, for the three source folders.

The folders stay where the brief put them (``sdr/``, ``backends/``, ``simulator/``), but
only ``sdr`` goes into site-packages: ``backends/`` installs as ``sdr.backends`` and
``simulator/`` as ``sdr.simulator``. Everything else (name, dependencies, entry points)
is in pyproject.toml.
"""

from setuptools import find_packages, setup

FOLDERS = {"sdr": "sdr", "sdr.backends": "backends", "sdr.simulator": "simulator"}

packages = [
    f"{name}.{sub}" if sub else name
    for name, folder in FOLDERS.items()
    for sub in ["", *find_packages(folder)]
]

setup(packages=packages, package_dir=FOLDERS)
