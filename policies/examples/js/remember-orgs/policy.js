// Hostile: remembers every organisation it has been asked about, at module level, and denies
// once it has seen two. In a fresh instance per decision it always allows; an instance kept
// warm and shared between organisations gives itself away. The twin of
// policies/hostile/remember-orgs/src/lib.rs.

// Distinct organisation ids in the order first seen (a Set keeps insertion order); lives as
// long as the instance does.
const seen = new Set();

export function authorize(request) {
  seen.add(request.principal.organisationId);
  if (seen.size < 2) {
    return { tag: "allow" };
  }
  const reason = `seen organisations: ${[...seen].join(", ")}`;
  return { tag: "deny", val: { status: "forbidden", reason } };
}
