"""`python -m turnkeeper_server` is `turnkeeper serve`."""

import sys

from turnkeeper_server.main import main

sys.exit(main())
