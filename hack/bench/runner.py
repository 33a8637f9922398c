"""The bench: its parts put together, run in order."""

from __future__ import annotations

from .api import Api
from .doors import Doors
from .fill import Fill
from .load import Loads
from .overload import Overload
from .sandbox import Sandbox
from .setup import Setup
from .stored import Stored


class Bench(Setup, Overload, Loads, Sandbox, Fill, Stored, Doors):
    async def run(self) -> None:
        self.kube = Api(self.ep, limit=32)
        try:
            self.setup_cluster()
            self.start_helpers()
            self.publish_tools()
            self.wait_rbac()
            if self.cfg.parts & {"1", "2", "5"}:
                await self.calls_and_floor()
            if "6" in self.cfg.parts:
                await self.overload()
            if "3" in self.cfg.parts:
                await self.sandbox()
            if "4" in self.cfg.parts:
                await self.fill()
            if "7" in self.cfg.parts:
                await self.stored()
            if "8" in self.cfg.parts:
                await self.doors()
        finally:
            for agent in self.agents:
                await agent.api.close()
            await self.kube.close()
