"""tritonwatch: keeps Triton Inference Server deployments inside their latency budget."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tritonwatch")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
