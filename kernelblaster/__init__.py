"""KernelBlaster: a CUDA language server that profiles, explains and rewrites GPU kernels.

The installed package maps its subpackages from the repository's top-level folders
(pyproject.toml). Run from a checkout's root, Python finds this folder first, without them; so
the checkout's root joins the package path, giving the same subpackages as the installed map."""

from pathlib import Path

__version__ = "0.1.0"

_checkout = Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and (_checkout / "harness" / "__init__.py").is_file():
    __path__.append(str(_checkout))
