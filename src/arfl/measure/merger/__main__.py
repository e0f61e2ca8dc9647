"""``python -m arfl.measure.merger``: the merger process (:func:`~.process.main`)."""

import sys

from arfl.measure.merger.process import main

sys.exit(main())
