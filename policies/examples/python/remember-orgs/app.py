"""Hostile: remembers every organisation it has been asked about, at module level, and denies
once it has seen two. In a fresh instance per decision it always allows; an instance kept warm
and shared between organisations gives itself away. The twin of
policies/hostile/remember-orgs/src/lib.rs.
"""

import wit_world
from wit_world.imports.types import (
    AuthzDecision,
    AuthzDecision_Allow,
    AuthzDecision_Deny,
    AuthzRequest,
    Denial,
    DenyStatus,
)

# Distinct organisation ids in the order first seen; lives as long as the instance does.
SEEN: list[str] = []


class WitWorld(wit_world.WitWorld):
    def authorize(self, request: AuthzRequest) -> AuthzDecision:
        organisation = request.principal.organisation_id
        if organisation not in SEEN:
            SEEN.append(organisation)
        if len(SEEN) < 2:
            return AuthzDecision_Allow()
        reason = "seen organisations: " + ", ".join(SEEN)
        return AuthzDecision_Deny(Denial(DenyStatus.FORBIDDEN, reason))
