"""Hostile: allocates without bound (the memory cap must stop it)."""

import wit_world
from wit_world.imports.types import AuthzDecision, AuthzDecision_Allow, AuthzRequest


class WitWorld(wit_world.WitWorld):
    def authorize(self, request: AuthzRequest) -> AuthzDecision:
        hoard = []
        while True:
            hoard.append(bytearray(1 << 20))
        return AuthzDecision_Allow()
