"""A billing meter in a process of its own, for the kill -9 tests: ``python -m tests.support.billing_meter URL
OWNER HOME`` ticks a ``BillingController`` every 0.05 s (lease: three ticks) until it is killed, counting its
ticks in ``HOME/ticks``."""

from __future__ import annotations

import asyncio
import logging
import sys
from datetime import timedelta
from pathlib import Path

from aicenter.controllers.billing import BillingController
from aicenter.db.engine import Database
from tests.support.settings import make_settings


async def main(url: str, owner: str, home: Path) -> None:
    db = Database(url)
    settings = make_settings(home, database_url=url, billing_interval_s=0.05)
    meter = BillingController(db, settings, owner=owner)
    meter.min_period = timedelta(0)  # charge at every tick: as many periods (and chances to double) as possible
    ticks = home / "ticks"
    n = 0
    while True:
        await meter.tick()
        n += 1
        ticks.write_text(str(n))  # the test kills a meter only once it is past its imports and ticking
        await asyncio.sleep(0.05)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
