"""Hostile: loops forever (the epoch deadline must stop it)."""

import wit_world
from wit_world.imports.types import AuthzDecision, AuthzDecision_Allow, AuthzRequest


class WitWorld(wit_world.WitWorld):
    def authorize(self, request: AuthzRequest) -> AuthzDecision:
        n = 0
        while True:
            n += 1
        return AuthzDecision_Allow()
