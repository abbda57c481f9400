"""`python -m outbox_relay`: the relay, as `cdcpipe relay run` runs it (settings from CDCPIPE_* and the file)."""

import sys

from outbox_relay.serve import main

sys.exit(main())
