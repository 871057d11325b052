"""The installed hypann version (defined once, in pyproject.toml): ``hypann.__version__``."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hypann")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without metadata
    __version__ = "0+unknown"
