"""Quality measures of approximate nearest-neighbour answers (recall, approximation ratios).

The functions are defined in :mod:`hypann.metrics`, in the package's bottom layer, so that
:class:`hypann.SearchResult` and the graph index's ``ef`` calibration use the same recall;
this module is their place in the evaluation namespace (the same names, re-exported).
"""

from hypann.metrics import *  # noqa: F401,F403 - the public names of hypann.metrics
from hypann.metrics import __all__  # noqa: F401
