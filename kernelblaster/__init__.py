"""KernelBlaster: a CUDA language server that profiles, explains and rewrites GPU kernels.

The installed package maps its subpackages from the repository's top-level folders
(`kernelblaster.harness` is `harness/`, ...; see pyproject.toml). Run from the root of a
checkout, Python finds this folder first (the working directory heads sys.path), without those
subpackages, and `import kernelblaster.agents` would fail whatever is installed. So when this
folder sits in a checkout, the checkout's root joins the package path: its folders are the
subpackages, exactly as the installed mapping has them.
"""

from pathlib import Path

__version__ = "0.1.0"

_checkout = Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and (_checkout / "harness" / "__init__.py").is_file():
    __path__.append(str(_checkout))
