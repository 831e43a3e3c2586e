-- wrk: POST /v1/personal-access-tokens, spread round-robin over the users in tokens.txt,
-- each request with a unique name. Env: BENCH_ORG, BENCH_WS, BENCH_TOKENS (file),
-- BENCH_WORKSPACES (below), and
-- BENCH_IDEMPOTENCY: unset (no key), "fresh" (a new key per request) or "replay" (one key, one
-- body, one token: every request after the first is a replay).
-- Answers outside 2xx are counted by count.lua, loaded from this script's folder.
dofile(debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") .. "count.lua")
local tokens = {}
for line in io.lines(os.getenv("BENCH_TOKENS")) do tokens[#tokens + 1] = line end
local org, ws = os.getenv("BENCH_ORG"), os.getenv("BENCH_WS")
-- BENCH_WORKSPACES (optional): a file whose line n is the workspace token n issues into (its
-- grant), to spread the load over several workspaces.
local workspaces = nil
if os.getenv("BENCH_WORKSPACES") then
  workspaces = {}
  for line in io.lines(os.getenv("BENCH_WORKSPACES")) do workspaces[#workspaces + 1] = line end
end
local counter = 0
thread_id = 0 -- set per thread by setup(); must stay global
local threads = 0

function setup(thread)
  count_setup(thread)
  threads = threads + 1
  thread:set("thread_id", threads)
end

local mode = os.getenv("BENCH_IDEMPOTENCY")
-- wrk's math.random is unseeded (the same sequence every run): a per-run tag keeps names and
-- keys unique across runs against the same database.
local run = 0

function init(args)
  run = os.time()
end

function request()
  counter = counter + 1
  local headers = { ["Content-Type"] = "application/json" }
  local token, body
  if mode == "replay" then
    token = tokens[1]
    headers["Idempotency-Key"] = "bench-replay-key-0001"
    body = string.format(
      '{"name":"replayed","scopes":["activity:read"],"organisationId":"%s","workspaceIds":["%s"]}', org, ws)
  else
    local n = (counter + thread_id * 7) % #tokens + 1
    token = tokens[n]
    local target = workspaces and workspaces[n] or ws
    local unique = string.format("%d-%d-%d", run, thread_id, counter)
    body = string.format(
      '{"name":"wrk-%s","scopes":["activity:read"],"organisationId":"%s","workspaceIds":["%s"]}', unique, org, target)
    if mode == "fresh" then headers["Idempotency-Key"] = "bench-key-" .. unique end
  end
  headers["Authorization"] = "Bearer " .. token
  return wrk.format("POST", "/v1/personal-access-tokens", headers, body)
end

